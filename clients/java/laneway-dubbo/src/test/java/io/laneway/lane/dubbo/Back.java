package io.laneway.lane.dubbo;

import java.util.concurrent.CompletableFuture;

/** The downstream service of the tests: answers which instance served and what it saw. */
public interface Back {
    String who();

    CompletableFuture<String> whoAsync();
}
