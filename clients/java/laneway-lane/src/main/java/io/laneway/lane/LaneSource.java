package io.laneway.lane;

/**
 * Where {@link Lane#current()} looks when no lane was set on this thread: a framework's own
 * per-request context that travels to threads laneway does not see (Dubbo's async server
 * context). Found with {@link java.util.ServiceLoader}; an implementation must be cheap, must
 * not allocate, and answers {@code null} when it knows no lane.
 */
public interface LaneSource {
    /** The lane of the request this thread works for, or {@code null}. */
    String lane();
}
