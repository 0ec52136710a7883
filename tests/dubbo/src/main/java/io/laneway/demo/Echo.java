package io.laneway.demo;

/** The one service every harness provider exports. */
public interface Echo {
    /** The id of the provider process that answered (e.g. "p2"). */
    String whoami();
}
