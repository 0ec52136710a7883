package io.laneway.harness;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicReference;

import io.laneway.demo.Hop;
import io.laneway.lane.Lane;
import io.laneway.lane.kafka.LaneConsumerInterceptor;
import io.laneway.lane.kafka.LaneConsumers;
import io.laneway.lane.kafka.LaneProducerInterceptor;
import io.laneway.lane.kafka.LaneRecords;
import org.apache.dubbo.config.ReferenceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka pods with laneway's Kafka interceptors: a producer, and a consumer that handles each record
 * it is given by calling --next's {@link Hop} chain over Dubbo, in the record's lane.
 *
 * <pre>
 * kproducer --bootstrap B --topic T [--labels FILE]
 *     stdin: produce &lt;n&gt; &lt;lane|-&gt; &lt;prefix&gt; &lt;per_second|0&gt;
 *         n records valued prefix-0 .. prefix-(n-1), produced while serving a request in lane
 *         (- : none, so the pod's own lane goes on); {"cmd":"produce","n":n,"first":ms,"last":ms}
 * kconsumer --id ID --bootstrap B --topic T --group G --zk HOST:PORT --app APP --next APP [--labels FILE]
 *     joins G (G_&lt;lane&gt; in a lane), reads APP's ownership document from ZooKeeper through Dubbo, and
 *     prints for each record handled:
 *     {"h":"prefix-i","lane":"..."|null,"by":"ID","chain":"user-0","born":ms,"at":ms}
 * kdrain --bootstrap B --topic T --group G [--tier LANE --messages FILE]
 *     reads T from the beginning to its end as it is now, handling nothing, with laneway's
 *     interceptor for tier LANE (document in FILE) or without (a plain consumer);
 *     {"cmd":"drain","records":handed,"ms":elapsed}
 * </pre>
 */
final class KafkaRoles {
    static void producer(Args args) throws Exception {
        Properties config = new Properties();
        config.put("bootstrap.servers", args.require("bootstrap"));
        config.put("key.serializer", StringSerializer.class.getName());
        config.put("value.serializer", StringSerializer.class.getName());
        config.put("interceptor.classes", LaneProducerInterceptor.class.getName());
        config.put("linger.ms", "5");
        String topic = args.require("topic");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(config)) {
            Main.OUT.println("READY kproducer ms=" + (System.currentTimeMillis() - Main.JVM_START));
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null && !line.trim().equals("quit")) {
                String[] w = line.trim().split("\\s+");
                int n = Integer.parseInt(w[1]);
                String lane = w[2].equals("-") ? null : w[2];
                int perSecond = Integer.parseInt(w[4]);
                long first = System.currentTimeMillis();
                for (int i = 0; i < n; i++) {
                    if (perSecond > 0) {
                        long due = first + i * 1000L / perSecond;
                        long wait = due - System.currentTimeMillis();
                        if (wait > 0) {
                            Thread.sleep(wait);
                        }
                    }
                    String previous = Lane.set(lane);
                    try {
                        producer.send(new ProducerRecord<>(topic, Integer.toString(i), w[3] + "-" + i));
                    } finally {
                        Lane.restore(previous);
                    }
                }
                producer.flush();
                Main.OUT.println("{\"cmd\":\"produce\",\"n\":" + n + ",\"first\":" + first
                        + ",\"last\":" + System.currentTimeMillis() + "}");
            }
        }
        System.exit(0);
    }

    static void consumer(Args args) throws Exception {
        String id = args.require("id");
        String zk = args.require("zk");
        ReferenceConfig<Hop> ref = Common.hopReference(args.require("next"));
        var registry = Common.registry(zk);
        registry.setRegister(false);
        DubboBootstrap.getInstance()
                .application(Common.application(args.require("app"), null))
                .registry(registry)
                .configCenter(Common.configCenter(zk))
                .reference(ref)
                .start();
        Hop next = ref.get();

        Properties config = consumerConfig(args);
        config.put(LaneConsumerInterceptor.APPLICATION, args.require("app"));
        LaneConsumers.configure(config);
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
                    AtomicReference<String> chain = new AtomicReference<>();
                    LaneRecords.handle(record, () -> chain.set(call(next)));
                    String lane = LaneRecords.lane(record);
                    Main.OUT.println("{\"h\":" + Common.json(record.value())
                            + ",\"lane\":" + (lane == null ? "null" : Common.json(lane))
                            + ",\"by\":" + Common.json(id) + ",\"chain\":" + Common.json(chain.get())
                            + ",\"born\":" + record.timestamp() + ",\"at\":" + System.currentTimeMillis() + "}");
                }
            }
        }
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
                handed += consumer.poll(Duration.ofMillis(200)).count();
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

    private static String call(Hop next) {
        try {
            return String.join(">", next.serve());
        } catch (RuntimeException e) {
            System.err.println("call failed: " + e);
            return "error";
        }
    }

    private KafkaRoles() {}
}
