package io.laneway.lane.kafka;

import java.nio.charset.StandardCharsets;

import io.laneway.lane.Baggage;
import io.laneway.lane.Lane;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;

/**
 * The lane a record carries, and handling a record in it: header {@value #HEADER}, else the
 * {@code lane} member of a W3C {@value #BAGGAGE} header; an invalid value is no lane.
 *
 * <p>With {@link LaneConsumerInterceptor}, iterating a poll's records handles each in its lane
 * already; a record handed to another thread is handled there in its lane with {@link #handle}:
 *
 * <pre>{@code
 * workers.execute(() -> LaneRecords.handle(record, () -> process(record)));   // calls made in process() keep its lane
 * }</pre>
 */
public final class LaneRecords {
    /** The record header holding the lane. */
    public static final String HEADER = "x-lane";
    /** The W3C baggage header, whose {@code lane} member holds the lane too. */
    public static final String BAGGAGE = "baggage";

    private LaneRecords() {}

    /** The lane {@code record} carries, or {@code null}. */
    public static String lane(ConsumerRecord<?, ?> record) {
        return lane(record.headers());
    }

    /** The lane in {@code headers}, or {@code null}. */
    public static String lane(Headers headers) {
        String lane = Lane.validOrNull(text(headers.lastHeader(HEADER)));
        if (lane != null) {
            return lane;
        }
        String baggage = text(headers.lastHeader(BAGGAGE));
        return baggage == null ? null : Baggage.lane(baggage);
    }

    /**
     * Runs {@code handler} as serving {@code record}: in the record's lane ({@link Lane#current()}),
     * so that the calls it makes (HTTP, Dubbo, Spring Cloud, more records) stay in the lane.
     */
    public static void handle(ConsumerRecord<?, ?> record, Runnable handler) {
        String previous = Lane.set(lane(record));
        boolean wasServing = Lane.serving(true);
        try {
            handler.run();
        } finally {
            Lane.serving(wasServing);
            Lane.restore(previous);
        }
    }

    /** Puts {@code lane} on {@code headers} as {@value #HEADER} and as W3C baggage, unless they have a lane. */
    static void stamp(Headers headers, String lane) {
        if (lane == null || headers.lastHeader(HEADER) != null) {
            return;
        }
        headers.add(HEADER, lane.getBytes(StandardCharsets.UTF_8));
        if (headers.lastHeader(BAGGAGE) == null) {
            headers.add(BAGGAGE, ("lane=" + lane).getBytes(StandardCharsets.UTF_8));
        }
    }

    private static String text(Header header) {
        return header == null || header.value() == null ? null : new String(header.value(), StandardCharsets.UTF_8);
    }
}
