package io.laneway.lane;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.BiConsumer;
import java.util.function.Consumer;
import java.util.logging.Level;

/**
 * Where the integrations tell what they see of lanes, for the application's own metrics: each
 * request served, by its lane and how it was learnt, each one that failed, by its lane, and each
 * request that arrived in no lane although its caller was in one (a hop upstream dropped the
 * lane). {@link LaneCounters} keeps them in memory, as JSON for a health check or an analysis.
 *
 * <pre>{@code LaneMetrics.register(new LaneMetrics() { ... });}</pre>
 *
 * <p>laneway-spring-cloud registers a Micrometer one when the application has a
 * {@code MeterRegistry}. An implementation must be cheap and must not throw.
 */
public interface LaneMetrics {
    /**
     * A request served in {@code lane} ({@code null}: none), learnt as {@code learnt}:
     * {@code header}, {@code baggage}, {@code tag} (Dubbo), {@code own} (the pod's own lane) or
     * {@code none}.
     */
    void served(String lane, String learnt);

    /** A request that arrived in no lane from a caller serving {@code callerLane}. */
    void lost(String callerLane);

    /**
     * A request served in {@code lane} ({@code null}: none; the pod's own lane where it has one)
     * that failed: answered with an HTTP status of 500 or more, or with an exception.
     */
    default void failed(String lane) {}

    /** A LaneMetrics that hands each request to {@code served} and each lost one to {@code lost}. */
    static LaneMetrics of(BiConsumer<String, String> served, Consumer<String> lost) {
        return new LaneMetrics() {
            @Override
            public void served(String lane, String learnt) {
                served.accept(lane, learnt);
            }

            @Override
            public void lost(String callerLane) {
                lost.accept(callerLane);
            }
        };
    }

    /** Tells {@code metrics} from now on; returns what stops that. */
    static Runnable register(LaneMetrics metrics) {
        Registered.ALL.add(metrics);
        return () -> Registered.ALL.remove(metrics);
    }

    /**
     * For integrations: a request served in {@code lane} ({@code null}: none; the pod's own lane
     * counts as {@code own}), learnt as {@code learnt} ({@code null} when it carried none).
     */
    static void countServed(String lane, String learnt) {
        List<LaneMetrics> all = Registered.ALL;
        if (all.isEmpty()) {
            return;
        }
        Carried c = Carried.of(lane, learnt);
        for (LaneMetrics m : all) {
            try {
                m.served(c.lane(), c.learnt());
            } catch (RuntimeException e) {
                Lane.LOG.log(Level.FINE, "laneway: lane metrics failed", e);
            }
        }
    }

    /** For integrations: a request served in {@code lane} ({@code null}: none) failed. */
    static void countFailed(String lane) {
        List<LaneMetrics> all = Registered.ALL;
        if (all.isEmpty()) {
            return;
        }
        String carried = Carried.of(lane, null).lane();
        for (LaneMetrics m : all) {
            try {
                m.failed(carried);
            } catch (RuntimeException e) {
                Lane.LOG.log(Level.FINE, "laneway: lane metrics failed", e);
            }
        }
    }

    /** For integrations: a request arrived in no lane from a caller serving {@code callerLane}. */
    static void countLost(String callerLane) {
        for (LaneMetrics m : Registered.ALL) {
            try {
                m.lost(callerLane);
            } catch (RuntimeException e) {
                Lane.LOG.log(Level.FINE, "laneway: lane metrics failed", e);
            }
        }
    }
}

/** The registered {@link LaneMetrics}. */
final class Registered {
    static final List<LaneMetrics> ALL = new CopyOnWriteArrayList<>();

    private Registered() {}
}
