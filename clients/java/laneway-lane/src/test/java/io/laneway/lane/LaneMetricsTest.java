package io.laneway.lane;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class LaneMetricsTest {
    /** What a registered LaneMetrics was told, one line per call. */
    static final class Told implements LaneMetrics {
        final List<String> lines = new ArrayList<>();

        @Override
        public void served(String lane, String learnt) {
            lines.add("served " + lane + " " + learnt);
        }

        @Override
        public void lost(String callerLane) {
            lines.add("lost " + callerLane);
        }
    }

    @AfterEach
    void clean() {
        OwnLane.configure(null, null);
    }

    @Test
    void registeredMetricsAreToldEachRequestByLaneAndHowItWasLearnt(@TempDir Path dir) throws Exception {
        Told told = new Told();
        Runnable unregister = LaneMetrics.register(told);
        LaneMetrics.countServed("dev-alice", "header");
        LaneMetrics.countServed(null, null);
        LaneMetrics.countLost("dev-alice");
        Path labels = dir.resolve("labels");
        Files.writeString(labels, "laneway.io/lane=\"gray\"\n");
        OwnLane.configure(labels, "laneway.io/lane");
        LaneMetrics.countServed(null, null);
        unregister.run();
        LaneMetrics.countServed("dev-alice", "header");
        assertEquals(List.of("served dev-alice header", "served null none", "lost dev-alice", "served gray own"),
                told.lines);
    }
}
