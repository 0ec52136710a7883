package io.laneway.lane.spring.cloud;

import io.laneway.lane.LaneMetrics;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;
import org.springframework.beans.factory.DisposableBean;
import org.springframework.beans.factory.SmartInitializingSingleton;

/**
 * laneway's {@link LaneMetrics} as Micrometer counters, registered while the application context
 * runs: {@value #REQUESTS} (Prometheus {@code laneway_requests_total}) by {@code lane} and
 * {@code learnt}, {@value #FAILED} ({@code laneway_requests_failed_total}) by {@code lane}, and
 * {@value #LOST} ({@code laneway_requests_lost_total}) by {@code caller_lane}. A request in no
 * lane counts with {@code lane="none"}.
 */
public class LaneMeters implements LaneMetrics, SmartInitializingSingleton, DisposableBean {
    public static final String REQUESTS = "laneway.requests";
    public static final String FAILED = "laneway.requests.failed";
    public static final String LOST = "laneway.requests.lost";

    private final MeterRegistry registry;
    private Runnable unregister;

    public LaneMeters(MeterRegistry registry) {
        this.registry = registry;
    }

    @Override
    public void served(String lane, String learnt) {
        Counter.builder(REQUESTS)
                .description("Requests served, by lane and by how the lane was learnt")
                .tag("lane", lane == null ? "none" : lane)
                .tag("learnt", learnt)
                .register(registry)
                .increment();
    }

    @Override
    public void failed(String lane) {
        Counter.builder(FAILED)
                .description("Requests that failed (HTTP 5xx or an exception), by lane")
                .tag("lane", lane == null ? "none" : lane)
                .register(registry)
                .increment();
    }

    @Override
    public void lost(String callerLane) {
        Counter.builder(LOST)
                .description("Requests that arrived in no lane from a caller in a lane")
                .tag("caller_lane", callerLane)
                .register(registry)
                .increment();
    }

    @Override
    public void afterSingletonsInstantiated() {
        unregister = LaneMetrics.register(this);
    }

    @Override
    public void destroy() {
        if (unregister != null) {
            unregister.run();
        }
    }
}
