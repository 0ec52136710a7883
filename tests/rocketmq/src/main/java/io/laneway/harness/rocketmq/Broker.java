package io.laneway.harness.rocketmq;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * A RocketMQ name server and one broker on 127.0.0.1, each in a JVM of its own started by this
 * one with RocketMQ's own main classes (NamesrvStartup, BrokerStartup), the topics created with
 * its admin tool (MQAdminStartup updateTopic) once the broker has registered, then
 * {@code READY rocketmq namesrv=P ms=M} on stdout. Stopping this JVM stops both.
 *
 * <p>{@code java -jar rocketmq-harness.jar --dir DIR --namesrv-port P --broker-port B --topics t:queues,...}
 * (the broker also listens on B-2 and B+1, as RocketMQ brokers do)
 */
public final class Broker {
    public static void main(String[] argv) throws Exception {
        if (argv.length > 0 && argv[0].equals("--child")) {
            child(argv);
            return;
        }
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        long start = System.currentTimeMillis();
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        Path dir = Paths.get(args.get("dir")).toAbsolutePath();
        Files.createDirectories(dir);
        String namesrv = "127.0.0.1:" + args.get("namesrv-port");
        Path namesrvConfig = Files.writeString(dir.resolve("namesrv.properties"),
                "listenPort=" + args.get("namesrv-port") + "\n");
        Path brokerConfig = Files.writeString(dir.resolve("broker.properties"), String.join("\n",
                "brokerClusterName=laneway", "brokerName=broker-a", "brokerId=0", "brokerIP1=127.0.0.1",
                "namesrvAddr=" + namesrv, "listenPort=" + args.get("broker-port"),
                "storePathRootDir=" + dir.resolve("store"), "storePathCommitLog=" + dir.resolve("store/commitlog"),
                "mappedFileSizeCommitLog=67108864", "autoCreateTopicEnable=false", ""));
        List<Process> servers = new ArrayList<>();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> servers.forEach(Process::destroy)));
        servers.add(java(dir, "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", namesrvConfig.toString()).start());
        servers.add(java(dir, "org.apache.rocketmq.broker.BrokerStartup", "-c", brokerConfig.toString()).start());
        for (String t : args.getOrDefault("topics", "").split(",")) {
            if (!t.isBlank()) {
                String[] parts = t.split(":");
                createTopic(dir, namesrv, parts[0], parts.length > 1 ? parts[1] : "4", servers);
            }
        }
        out.println("READY rocketmq namesrv=" + namesrv + " ms=" + (System.currentTimeMillis() - start));
        for (Process server : servers) {
            server.waitFor();
        }
    }

    /**
     * A JVM of this class path running {@code main} (through {@link #child}), its output in
     * {@code servers.log}.
     */
    private static ProcessBuilder java(Path dir, String main, String... args) {
        List<String> cmd = new ArrayList<>(List.of(
                Paths.get(System.getProperty("java.home"), "bin", "java").toString(), "-Xms64m", "-Xmx256m",
                "-Duser.home=" + dir, "-Drocketmq.home.dir=" + dir,
                "-cp", System.getProperty("java.class.path"), Broker.class.getName(), "--child", main));
        cmd.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(dir.resolve("servers.log").toFile()));
        pb.environment().put("ROCKETMQ_HOME", dir.toString());
        return pb;
    }

    /**
     * Creates {@code topic} on the cluster until the name server routes it (the broker registers
     * a few seconds after it starts; before that the admin tool finds no cluster to create it on).
     * A server that exits meanwhile fails it at once.
     */
    private static void createTopic(Path dir, String namesrv, String topic, String queues, List<Process> servers)
            throws Exception {
        long deadline = System.currentTimeMillis() + 120_000;
        do {
            if (servers.stream().anyMatch(server -> !server.isAlive())) {
                throw new IllegalStateException("rocketmq: a server exited: see " + dir.resolve("servers.log"));
            }
            admin(dir, "updateTopic", "-n", namesrv, "-c", "laneway", "-t", topic, "-r", queues, "-w", queues);
            if (admin(dir, "topicRoute", "-n", namesrv, "-t", topic).contains("\"queueDatas\":[")) {
                return;
            }
            Thread.sleep(1000);
        } while (System.currentTimeMillis() < deadline);
        throw new IllegalStateException("rocketmq: topic " + topic + " never routed");
    }

    /** What the admin tool printed for {@code args}. */
    private static String admin(Path dir, String... args) throws IOException, InterruptedException {
        Path output = dir.resolve("admin.out");
        Process p = java(dir, "org.apache.rocketmq.tools.command.MQAdminStartup", args)
                .redirectOutput(output.toFile()).start();
        if (!p.waitFor(60, TimeUnit.SECONDS)) {
            p.destroyForcibly();
        }
        return Files.readString(output);
    }

    /**
     * {@code --child MAIN ARGS...}: runs MAIN, and exits when stdin, a pipe from the harness JVM,
     * ends: the name server and broker go when the harness goes, however it is stopped.
     */
    private static void child(String[] argv) throws Exception {
        Thread watchdog = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // nothing is sent: the pipe only tells that the harness lives
                }
            } catch (IOException e) {
                // the harness is gone either way
            }
            Runtime.getRuntime().halt(0);
        }, "harness-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        String[] args = java.util.Arrays.copyOfRange(argv, 2, argv.length);
        Class.forName(argv[1]).getMethod("main", String[].class).invoke(null, (Object) args);
    }

    private Broker() {}
}
