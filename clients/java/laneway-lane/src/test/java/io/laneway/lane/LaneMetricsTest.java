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
    @AfterEach
    void clean() {
        OwnLane.configure(null, null);
    }

    @Test
    void registeredMetricsAreToldEachRequestByLaneAndHowItWasLearnt(@TempDir Path dir) throws Exception {
        List<String> told = new ArrayList<>();
        Runnable unregister = LaneMetrics.register(LaneMetrics.of(
                (lane, learnt) -> told.add("served " + lane + " " + learnt), caller -> told.add("lost " + caller)));
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
                told);
    }

    @Test
    void failedRequestsCountByTheLaneTheyWereServedIn(@TempDir Path dir) throws Exception {
        LaneCounters counters = new LaneCounters();
        Runnable unregister = LaneMetrics.register(counters);
        try {
            LaneMetrics.countServed("gray", "header");
            LaneMetrics.countFailed("gray");
            LaneMetrics.countServed(null, null);
            LaneMetrics.countLost("dev-alice");
            Path labels = dir.resolve("labels");
            Files.writeString(labels, "laneway.io/lane=\"gray\"\n");
            OwnLane.configure(labels, "laneway.io/lane");
            LaneMetrics.countFailed(null);
        } finally {
            unregister.run();
        }
        LaneMetrics.countFailed("gray");
        assertEquals("{\"dev-alice\":{\"served\":0,\"failed\":0,\"lost\":1},"
                + "\"gray\":{\"served\":1,\"failed\":2,\"lost\":0},"
                + "\"none\":{\"served\":1,\"failed\":0,\"lost\":0}}", counters.json());
    }
}
