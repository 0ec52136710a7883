package io.laneway.lane;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ProbeTest {
    @AfterEach
    void clean() {
        OwnLane.configure(null, null);
        System.clearProperty(Probe.POD_PROPERTY);
    }

    @Test
    void aHopRecordsTheLaneItCarriedAndHowItLearntIt() {
        System.setProperty(Probe.POD_PROPERTY, "order-0");
        Probe probe = Probe.begin("p-1", "order", null, "dev-alice", "tag");
        try {
            assertSame(probe, Probe.forCall());
            probe.collect("[{\"pod\":\"user-0\"},{\"pod\":\"pay-0\"}]");
            probe.collect("not a list");
            assertEquals("[{\"app\":\"order\",\"pod\":\"order-0\",\"lane\":\"dev-alice\",\"learnt\":\"tag\",\"own\":null},"
                    + "{\"pod\":\"user-0\"},{\"pod\":\"pay-0\"}]", probe.hops());
        } finally {
            Probe.end(probe);
        }
        assertNull(Probe.forCall(), "nothing in flight once it ended");
    }

    @Test
    void aRequestInNoLaneCarriesThePodsOwnLaneOrNone(@TempDir Path dir) throws Exception {
        Probe none = Probe.begin("p-2", "user", null, null, null);
        Probe.end(none);
        assertEquals("[{\"app\":\"user\",\"pod\":" + json(Probe.pod()) + ",\"lane\":null,\"learnt\":\"none\",\"own\":null}]",
                none.hops());

        Path labels = dir.resolve("labels");
        Files.writeString(labels, "laneway.io/lane=\"gray\"\n");
        OwnLane.configure(labels, "laneway.io/lane");
        Probe own = Probe.begin("p-3", "user", null, null, null);
        Probe.end(own);
        assertEquals("[{\"app\":\"user\",\"pod\":" + json(Probe.pod()) + ",\"lane\":\"gray\",\"learnt\":\"own\",\"own\":\"gray\"}]",
                own.hops());
    }

    @Test
    void aCallOnABareThreadBelongsToTheOnlyProbeInFlight() throws Exception {
        ExecutorService bare = Executors.newSingleThreadExecutor();
        Probe probe = Probe.begin("p-4", "order", null, "dev-alice", "tag");
        try {
            assertSame(probe, bare.submit(Probe::forCall).get(), "a bare thread's call is the probe's");
            assertNull(bare.submit(() -> {
                boolean was = Lane.serving(true);
                try {
                    return Probe.forCall();
                } finally {
                    Lane.serving(was);
                }
            }).get(), "a thread serving another request is not");
            Probe other = bare.submit(() -> Probe.begin("p-5", "order", null, null, null)).get();
            ExecutorService third = Executors.newSingleThreadExecutor();
            assertNull(third.submit(Probe::forCall).get(), "two in flight: unknown");
            third.shutdown();
            bare.submit(() -> Probe.end(other)).get();
        } finally {
            Probe.end(probe);
            bare.shutdown();
        }
    }

    @Test
    void aMarkThatIsNotAnIdStartsNoProbe() {
        assertNull(Probe.begin("", "a", null, null, null));
        assertNull(Probe.begin("a b", "a", null, null, null));
        assertNull(Probe.begin("x".repeat(65), "a", null, null, null));
        assertNull(Probe.forCall());
    }

    private static String json(String s) {
        return s == null ? "null" : "\"" + s + "\"";
    }
}
