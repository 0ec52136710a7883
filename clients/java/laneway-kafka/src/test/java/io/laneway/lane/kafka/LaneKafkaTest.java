package io.laneway.lane.kafka;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;

import io.laneway.lane.Lane;
import io.laneway.lane.OwnLane;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class LaneKafkaTest {
    // dev-alice's consumers own dev-alice and dev-carol from 1005000; relabelled out from 1006000
    private static final String DOCUMENT = "{\"key\": \"order-service\", \"epochs\": ["
            + "{\"from\": 0, \"owners\": {}},"
            + "{\"from\": 1005000, \"owners\": {\"dev-alice\": [\"dev-alice\", \"dev-carol\"]}},"
            + "{\"from\": 1006000, \"owners\": {}}]}";

    private static final TopicPartition ORDERS = new TopicPartition("orders", 0);

    @TempDir
    Path dir;

    @AfterEach
    void clear() {
        Lane.set(null);
        OwnLane.configure(null, null);
    }

    private static ProducerRecord<Object, Object> produced() {
        return new ProducerRecord<>("orders", null, null, "k", "v", new RecordHeaders());
    }

    private static String header(RecordHeaders headers, String name) {
        return headers.lastHeader(name) == null ? null
                : new String(headers.lastHeader(name).value(), StandardCharsets.UTF_8);
    }

    @Test
    void recordsProducedInALaneCarryItAsAHeaderAndAsBaggage() {
        LaneProducerInterceptor producer = new LaneProducerInterceptor();
        Lane.set("dev-alice");
        ProducerRecord<Object, Object> record = producer.onSend(produced());
        assertEquals("dev-alice", header((RecordHeaders) record.headers(), "x-lane"));
        assertEquals("lane=dev-alice", header((RecordHeaders) record.headers(), "baggage"));

        ProducerRecord<Object, Object> own = produced();
        own.headers().add("x-lane", "gray".getBytes(StandardCharsets.UTF_8));
        producer.onSend(own);
        assertEquals(1, own.headers().toArray().length, "the application's own lane wins");

        Lane.set(null);
        assertEquals(0, producer.onSend(produced()).headers().toArray().length, "no lane, no header");
    }

    private static ConsumerRecord<Object, Object> record(long offset, String lane, long born, boolean baggage) {
        RecordHeaders headers = new RecordHeaders();
        if (lane != null) {
            headers.add(baggage ? "baggage" : "x-lane",
                    ((baggage ? "user=7,lane=" : "") + lane).getBytes(StandardCharsets.UTF_8));
        }
        return new ConsumerRecord<>("orders", 0, offset, born, TimestampType.CREATE_TIME, 1, 1, "k", "v",
                headers, Optional.empty());
    }

    private LaneConsumerInterceptor consumer(String tier, Path file) {
        LaneConsumerInterceptor consumer = new LaneConsumerInterceptor();
        Map<String, Object> config = new HashMap<>();
        config.put(LaneConsumerInterceptor.TIER, tier);
        config.put(LaneConsumerInterceptor.FILE, file.toString());
        config.put("group.id", tier.equals("baseline") ? "orders" : "orders_" + tier);
        consumer.configure(config);
        return consumer;
    }

    private static List<Long> offsets(ConsumerRecords<Object, Object> records) {
        List<Long> offsets = new ArrayList<>();
        records.forEach(r -> offsets.add(r.offset()));
        return offsets;
    }

    @Test
    void everyRecordGoesToExactlyOneTierByItsLaneAndTimestamp() throws Exception {
        Path file = Files.writeString(dir.resolve("order-service.laneway-messages"), DOCUMENT);
        List<ConsumerRecord<Object, Object>> batch = List.of(
                record(0, null, 1_005_500, false),        // untagged: baseline
                record(1, "dev-alice", 1_004_999, false), // before the switch: baseline
                record(2, "dev-alice", 1_005_000, false), // dev-alice
                record(3, "dev-carol", 1_005_999, true),  // falls back to dev-alice, lane in baggage
                record(4, "dev-alice", 1_006_000, false), // relabelled out: baseline
                record(5, "gray", 1_005_500, false));     // no tier lists it: baseline
        Map<TopicPartition, OffsetAndMetadata> next = Map.of(ORDERS, new OffsetAndMetadata(6));
        ConsumerRecords<Object, Object> polled = new ConsumerRecords<>(Map.of(ORDERS, batch), next);

        ConsumerRecords<Object, Object> baseline = consumer("baseline", file).onConsume(polled);
        ConsumerRecords<Object, Object> alice = consumer("dev-alice", file).onConsume(polled);
        ConsumerRecords<Object, Object> carol = consumer("dev-carol", file).onConsume(polled);
        assertEquals(List.of(0L, 1L, 4L, 5L), offsets(baseline));
        assertEquals(List.of(2L, 3L), offsets(alice));
        assertEquals(List.of(), offsets(carol), "a tier without consumers of its own takes nothing");
        assertEquals(next, alice.nextOffsets(), "records left out are consumed all the same");
        assertEquals(next, carol.nextOffsets());
    }

    @Test
    void theDocumentIsFollowedLiveAndWithoutItBaselineTakesEverything() throws Exception {
        Path file = dir.resolve("order-service.laneway-messages");
        LaneConsumerInterceptor alice = consumer("dev-alice", file);
        LaneConsumerInterceptor baseline = consumer("baseline", file);
        ConsumerRecords<Object, Object> polled = new ConsumerRecords<>(
                Map.of(ORDERS, List.of(record(0, "dev-alice", 1_005_500, false))),
                Map.of(ORDERS, new OffsetAndMetadata(1)));
        assertTrue(alice.onConsume(polled).isEmpty());
        assertEquals(List.of(0L), offsets(baseline.onConsume(polled)));

        Files.writeString(file, DOCUMENT);
        Files.setLastModifiedTime(file, FileTime.fromMillis(System.currentTimeMillis() + 5_000));
        Thread.sleep(1_100);
        assertEquals(List.of(0L), offsets(alice.onConsume(polled)));
        assertTrue(baseline.onConsume(polled).isEmpty());

        // a document that cannot be read leaves the last good one in force
        Files.writeString(file, "{\"epochs\": ");
        Files.setLastModifiedTime(file, FileTime.fromMillis(System.currentTimeMillis() + 10_000));
        Thread.sleep(1_100);
        assertEquals(List.of(0L), offsets(alice.onConsume(polled)));
    }

    @Test
    void theApplicationHandlesEachPolledRecordInItsLaneWithoutCodeOfItsOwn() throws Exception {
        Path file = Files.writeString(dir.resolve("order-service.laneway-messages"), DOCUMENT);
        List<ConsumerRecord<Object, Object>> batch = List.of(
                record(0, null, 1_005_500, false),
                record(1, "gray", 1_005_500, true),
                record(2, "dev-alice", 1_004_000, false));
        ConsumerRecords<Object, Object> polled = new ConsumerRecords<>(Map.of(ORDERS, batch),
                Map.of(ORDERS, new OffsetAndMetadata(3)));
        LaneConsumerInterceptor baseline = consumer("baseline", file);
        Lane.set("own");

        List<String> seen = new ArrayList<>();
        for (ConsumerRecord<Object, Object> record : baseline.onConsume(polled)) {
            seen.add(record.offset() + "@" + Lane.current() + "/" + Lane.serving());
        }
        assertEquals(List.of("0@null/true", "1@gray/true", "2@dev-alice/true"), seen);
        assertEquals("own", Lane.current(), "the thread has its own lane back after the loop");
        assertFalse(Lane.serving());

        List<String> onward = new ArrayList<>();
        LaneProducerInterceptor producer = new LaneProducerInterceptor();
        for (ConsumerRecord<Object, Object> record : baseline.onConsume(polled)) {
            onward.add(header((RecordHeaders) producer.onSend(produced()).headers(), "x-lane"));
        }
        assertEquals(Arrays.asList(null, "gray", "dev-alice"), onward, "records produced while handling one carry its lane");

        seen.clear();
        baseline.onConsume(polled).records(ORDERS).forEach(r -> seen.add(r.offset() + "@" + Lane.current()));
        baseline.onConsume(polled).records("orders").forEach(r -> seen.add(r.offset() + "@" + Lane.current()));
        assertEquals(List.of("0@null", "1@gray", "2@dev-alice", "0@null", "1@gray", "2@dev-alice"), seen);

        var records = baseline.onConsume(polled).iterator();
        records.next();
        records.next();
        assertEquals("gray", Lane.current(), "a loop left early keeps the record's lane until the next poll");
        baseline.onConsume(ConsumerRecords.empty());
        assertEquals("own", Lane.current());
        assertFalse(Lane.serving());
    }

    @Test
    void aRecordIsHandledInItsLaneAndTheThreadGetsItsOwnBack() {
        Lane.set("gray");
        String[] seen = new String[2];
        LaneRecords.handle(record(0, "dev-alice", 1, true), () -> {
            seen[0] = Lane.current();
            seen[1] = String.valueOf(Lane.serving());
        });
        assertArrayEquals(new String[] {"dev-alice", "true"}, seen);
        assertEquals("gray", Lane.current());
        assertFalse(Lane.serving());
        LaneRecords.handle(record(1, "not a lane!", 1, false), () -> seen[0] = Lane.current());
        assertNull(seen[0], "an invalid lane is no lane");
    }

    @Test
    void aConsumerInALaneJoinsItsLanesGroupAndGetsTheInterceptor() throws Exception {
        Path labels = Files.writeString(dir.resolve("labels"), "laneway.io/lane=\"dev-alice\"\n");
        OwnLane.configure(labels, null);
        Properties config = new Properties();
        config.put("group.id", "orders");
        config.put("interceptor.classes", "com.example.Audit");
        LaneConsumers.configure(config);
        assertEquals("orders_dev-alice", config.get("group.id"));
        assertEquals("com.example.Audit," + LaneConsumerInterceptor.class.getName(), config.get("interceptor.classes"));
        LaneConsumerInterceptor consumer = new LaneConsumerInterceptor();
        consumer.configure(Map.of("group.id", "orders_dev-alice"));
        assertEquals("dev-alice", consumer.tier());

        OwnLane.configure(dir.resolve("none"), null);
        assertEquals("orders", LaneConsumers.groupId("orders"));
    }
}
