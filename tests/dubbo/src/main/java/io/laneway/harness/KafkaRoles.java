package io.laneway.harness;

import java.time.Duration;
import java.util.List;
import java.util.Properties;

import io.laneway.demo.Hop;
import io.laneway.lane.kafka.LaneConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka pods with laneway-kafka on the class path and no laneway code, only its interceptors and
 * properties in their configuration: a producer, and a consumer that handles each record it is
 * given by calling --next's {@link Hop} chain over Dubbo.
 *
 * <pre>
 * kproducer --bootstrap B --topic T [--labels FILE]          (commands: {@link MessageLoop})
 * kconsumer --id ID --bootstrap B --topic T --group G --zk HOST:PORT --app APP --next APP [--labels FILE]
 *     joins G (the tier's group, as the pod's configuration gives it), reads APP's ownership
 *     document from ZooKeeper through Dubbo,
 *     and prints a line for each record handled ({@link MessageLoop})
 * kdrain --bootstrap B --topic T --group G [--tier LANE --messages FILE]
 *     reads T from the beginning to its end as it is now, iterating every record handed to it and
 *     handling nothing, with laneway's interceptor for tier LANE (document in FILE) or without (a
 *     plain consumer);
 *     {"cmd":"drain","records":handed,"ms":elapsed}
 * </pre>
 */
final class KafkaRoles {
    static void producer(Args args) throws Exception {
        Properties config = new Properties();
        config.put("interceptor.classes", "io.laneway.lane.kafka.LaneProducerInterceptor");
        config.put("bootstrap.servers", args.require("bootstrap"));
        config.put("key.serializer", StringSerializer.class.getName());
        config.put("value.serializer", StringSerializer.class.getName());
        config.put("linger.ms", "5");
        String topic = args.require("topic");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(config)) {
            MessageLoop.produce("kproducer", value -> producer.send(new ProducerRecord<>(topic, value)), producer::flush);
        }
    }

    static void consumer(Args args) throws Exception {
        String id = args.require("id");
        Hop next = MessageLoop.dubbo(args);

        Properties config = consumerConfig(args);
        config.put("interceptor.classes", "io.laneway.lane.kafka.LaneConsumerInterceptor");
        config.put("laneway.messages.application", args.require("app"));
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config)) {
            consumer.subscribe(List.of(args.require("topic")));
            boolean ready = false;
            while (true) {
                var records = consumer.poll(Duration.ofMillis(200));
                if (!ready && !consumer.assignment().isEmpty()) {
                    ready = true;
                    Main.OUT.println("READY kconsumer id=" + id + " group=" + config.get("group.id")
                            + " ms=" + (System.currentTimeMillis() - Main.JVM_START));
                }
                for (ConsumerRecord<String, String> record : records) {
                    MessageLoop.handled(id, next, record.value(), header(record, "x-lane"), record.timestamp());
                }
            }
        }
    }

    private static String header(ConsumerRecord<?, ?> record, String name) {
        var header = record.headers().lastHeader(name);
        return header == null ? null : new String(header.value(), java.nio.charset.StandardCharsets.UTF_8);
    }

    static void drain(Args args) {
        Properties config = consumerConfig(args);
        config.put("enable.auto.commit", "false");
        if (args.has("messages")) {
            config.put("interceptor.classes", LaneConsumerInterceptor.class.getName());
            config.put(LaneConsumerInterceptor.TIER, args.get("tier", "baseline"));
            config.put(LaneConsumerInterceptor.FILE, args.require("messages"));
        }
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config)) {
            var partitions = consumer.partitionsFor(args.require("topic")).stream()
                    .map(p -> new org.apache.kafka.common.TopicPartition(p.topic(), p.partition())).toList();
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            var end = consumer.endOffsets(partitions);
            long start = System.nanoTime();
            long handed = 0;
            while (partitions.stream().anyMatch(p -> consumer.position(p) < end.get(p))) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    handed += record.value() == null ? 0 : 1;
                }
            }
            long ms = (System.nanoTime() - start) / 1_000_000;
            Main.OUT.println("{\"cmd\":\"drain\",\"records\":" + handed + ",\"ms\":" + ms + "}");
        }
        System.exit(0);
    }

    /** --bootstrap and --group, string records, from the beginning of the topic. */
    private static Properties consumerConfig(Args args) {
        Properties config = new Properties();
        config.put("bootstrap.servers", args.require("bootstrap"));
        config.put("group.id", args.require("group"));
        config.put("key.deserializer", StringDeserializer.class.getName());
        config.put("value.deserializer", StringDeserializer.class.getName());
        config.put("auto.offset.reset", "earliest");
        return config;
    }

    private KafkaRoles() {}
}
