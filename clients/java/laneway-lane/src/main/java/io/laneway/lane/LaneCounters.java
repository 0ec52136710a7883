package io.laneway.lane;

import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;

/**
 * {@link LaneMetrics} kept in memory since the process started: per lane, the requests served, the
 * ones that failed and the ones that arrived in no lane from a caller in that lane. {@link #json()}
 * renders them for an endpoint of the application's own, e.g. for a progressive-delivery analysis
 * (Argo Rollouts' {@code web} metric with {@code jsonPath: "{$.gray.failed}"}):
 *
 * <pre>{"gray":{"served":120,"failed":3,"lost":0},"none":{"served":480,"failed":0,"lost":0}}</pre>
 *
 * <p>A request in no lane counts under {@code none}.
 */
public final class LaneCounters implements LaneMetrics {
    private static final String NONE = "none";
    private final Map<String, LongAdder[]> lanes = new ConcurrentHashMap<>();

    /** New counters, told every request from now on. */
    public static LaneCounters register() {
        LaneCounters counters = new LaneCounters();
        LaneMetrics.register(counters);
        return counters;
    }

    @Override
    public void served(String lane, String learnt) {
        count(lane, 0);
    }

    @Override
    public void failed(String lane) {
        count(lane, 1);
    }

    @Override
    public void lost(String callerLane) {
        count(callerLane, 2);
    }

    private void count(String lane, int which) {
        lanes.computeIfAbsent(lane == null ? NONE : lane, k -> new LongAdder[] {new LongAdder(), new LongAdder(),
                new LongAdder()})[which].increment();
    }

    /** The counts as JSON, lanes in name order (lane names need no escaping). */
    public String json() {
        StringBuilder out = new StringBuilder("{");
        new TreeMap<>(lanes).forEach((lane, c) -> out.append(out.length() > 1 ? "," : "")
                .append('"').append(lane).append("\":{\"served\":").append(c[0].sum())
                .append(",\"failed\":").append(c[1].sum()).append(",\"lost\":").append(c[2].sum()).append('}'));
        return out.append('}').toString();
    }
}
