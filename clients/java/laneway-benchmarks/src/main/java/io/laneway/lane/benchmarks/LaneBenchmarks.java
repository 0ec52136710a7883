package io.laneway.lane.benchmarks;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

import io.laneway.lane.Baggage;
import io.laneway.lane.Lane;
import io.laneway.lane.OwnLane;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.TearDown;

/** Lane look-ups and baggage parsing; OwnLane reads a real labels file, refreshed every second. */
public class LaneBenchmarks extends Measured {
    private static final String BAGGAGE = "userId=alice,serverNode=DF%2028,lane=dev-alice;ttl=60,isProduction=false";
    private static final String BAGGAGE_WITHOUT_LANE = "userId=alice,serverNode=DF%2028,isProduction=false";

    private Path dir;

    @Setup
    public void setUp() throws IOException {
        dir = Files.createTempDirectory("laneway-bench");
        Path labels = dir.resolve("labels");
        Files.writeString(labels, "app=\"shop\"\nlaneway.io/lane=\"gray\"\npod-template-hash=\"5d9c\"\n");
        OwnLane.configure(labels, null);
    }

    @TearDown
    public void tearDown() throws IOException {
        Lane.set(null);
        OwnLane.configure(null, null);
        Files.deleteIfExists(dir.resolve("labels"));
        Files.deleteIfExists(dir);
    }

    /** While serving a request of a lane. */
    @Benchmark
    public String effectiveRequestLane() {
        Lane.set("dev-alice");
        return Lane.effective();
    }

    /** Outside any request: falls through the Dubbo async source to the own lane. */
    @Benchmark
    public String effectiveOwnLane() {
        Lane.set(null);
        return Lane.effective();
    }

    @Benchmark
    public String ownLaneGet() {
        return OwnLane.get();
    }

    /** Set for a request and restored after it, as the filters do. */
    @Benchmark
    public String setAndRestore() {
        String previous = Lane.set("dev-alice");
        Lane.restore(previous);
        return previous;
    }

    @Benchmark
    public String baggageWithLane() {
        return Baggage.lane(BAGGAGE);
    }

    @Benchmark
    public String baggageWithoutLane() {
        return Baggage.lane(BAGGAGE_WITHOUT_LANE);
    }
}
