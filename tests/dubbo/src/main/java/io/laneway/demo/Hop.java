package io.laneway.demo;

import java.util.List;

/** One hop of a call chain: every pod that served the call, this one first. */
public interface Hop {
    List<String> serve();
}
