package io.laneway.lane.dubbo;

/** The upstream service of the end-to-end test: each method calls {@link Back} once, differently. */
public interface Front {
    String call();

    /** Server-side async: answers from another thread after {@code signalContextSwitch()}. */
    String callFromAsyncContext();

    /** Calls {@link Back#whoAsync()} through Dubbo's {@code CompletableFuture} stub. */
    String callThroughFuture();

    /** Sets {@code dubbo.tag} itself before calling. */
    String callTagged(String tag);

    /** Calls from a pool thread handed the work through {@code Lane.wrap}. */
    String callFromWrappedPool();
}
