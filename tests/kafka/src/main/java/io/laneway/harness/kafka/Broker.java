package io.laneway.harness.kafka;

import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.Uuid;

/**
 * One Kafka node in KRaft mode (broker and controller in one JVM) on 127.0.0.1: formats its
 * storage (kafka.tools.StorageTool, in a child JVM), starts kafka.Kafka in this one, creates the
 * topics and prints {@code READY kafka port=P ms=M} on stdout.
 *
 * <p>{@code java -jar kafka-harness.jar --dir DIR --port P --controller-port C --topics t:partitions,...}
 */
public final class Broker {
    public static void main(String[] argv) throws Exception {
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        long start = System.currentTimeMillis();
        Map<String, String> args = options(argv);
        Path dir = Paths.get(args.get("dir"));
        int port = Integer.parseInt(args.get("port"));
        Path config = writeConfig(dir, port, Integer.parseInt(args.get("controller-port")));
        if (!Files.exists(dir.resolve("data").resolve("meta.properties"))) {
            format(config);
        }
        Thread server = new Thread(() -> kafka.Kafka.main(new String[] {config.toString()}), "kafka");
        server.start();
        createTopics("127.0.0.1:" + port, args.getOrDefault("topics", ""));
        out.println("READY kafka port=" + port + " ms=" + (System.currentTimeMillis() - start));
        server.join();
    }

    private static Map<String, String> options(String[] argv) {
        Map<String, String> args = new java.util.HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        return args;
    }

    private static Path writeConfig(Path dir, int port, int controllerPort) throws IOException {
        Files.createDirectories(dir);
        Properties p = new Properties();
        p.setProperty("process.roles", "broker,controller");
        p.setProperty("node.id", "1");
        p.setProperty("controller.quorum.voters", "1@127.0.0.1:" + controllerPort);
        p.setProperty("listeners", "PLAINTEXT://127.0.0.1:" + port + ",CONTROLLER://127.0.0.1:" + controllerPort);
        p.setProperty("advertised.listeners", "PLAINTEXT://127.0.0.1:" + port);
        p.setProperty("controller.listener.names", "CONTROLLER");
        p.setProperty("inter.broker.listener.name", "PLAINTEXT");
        p.setProperty("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT");
        p.setProperty("log.dirs", dir.resolve("data").toString());
        p.setProperty("offsets.topic.replication.factor", "1");
        p.setProperty("offsets.topic.num.partitions", "4");
        p.setProperty("transaction.state.log.replication.factor", "1");
        p.setProperty("transaction.state.log.min.isr", "1");
        p.setProperty("share.coordinator.state.topic.replication.factor", "1");
        p.setProperty("share.coordinator.state.topic.min.isr", "1");
        p.setProperty("group.initial.rebalance.delay.ms", "0");
        p.setProperty("auto.create.topics.enable", "false");
        Path config = dir.resolve("server.properties");
        try (FileOutputStream f = new FileOutputStream(config.toFile())) {
            p.store(f, "laneway test broker");
        }
        return config;
    }

    private static void format(Path config) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(List.of(
                Paths.get(System.getProperty("java.home"), "bin", "java").toString(),
                "-cp", System.getProperty("java.class.path"),
                "kafka.tools.StorageTool", "format", "-t", Uuid.randomUuid().toString(), "-c", config.toString()));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.INHERIT).start();
        if (!p.waitFor(120, TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new IllegalStateException("kafka storage format failed");
        }
    }

    private static void createTopics(String bootstrap, String topics) throws Exception {
        List<NewTopic> wanted = new ArrayList<>();
        for (String t : topics.split(",")) {
            if (!t.isBlank()) {
                String[] parts = t.split(":");
                wanted.add(new NewTopic(parts[0], parts.length > 1 ? Integer.parseInt(parts[1]) : 1, (short) 1));
            }
        }
        Properties p = new Properties();
        p.setProperty("bootstrap.servers", bootstrap);
        long deadline = System.currentTimeMillis() + 120_000;
        while (true) {
            try (Admin admin = Admin.create(p)) {
                java.util.Set<String> existing = admin.listTopics().names().get(10, TimeUnit.SECONDS);
                wanted.removeIf(t -> existing.contains(t.name()));
                if (!wanted.isEmpty()) {
                    admin.createTopics(wanted).all().get(30, TimeUnit.SECONDS);
                }
                return;
            } catch (Exception e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
                Thread.sleep(500);
            }
        }
    }

    private Broker() {}
}
