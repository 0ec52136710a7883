package io.laneway.harness.rocketmq;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.namesrv.NamesrvConfig;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * A RocketMQ name server and one broker in this JVM on 127.0.0.1, the topics created, then
 * {@code READY rocketmq namesrv=P ms=M} on stdout.
 *
 * <p>{@code java -jar rocketmq-harness.jar --dir DIR --namesrv-port P --broker-port B --topics t:queues,...}
 * (the broker also listens on B-2 and B+1, as RocketMQ brokers do)
 */
public final class Broker {
    public static void main(String[] argv) throws Exception {
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        long start = System.currentTimeMillis();
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        Path dir = Paths.get(args.get("dir"));
        Files.createDirectories(dir);
        System.setProperty("rocketmq.home.dir", dir.toString());
        System.setProperty("user.home", dir.toString());
        int namesrvPort = Integer.parseInt(args.get("namesrv-port"));

        NamesrvConfig namesrvConfig = new NamesrvConfig();
        namesrvConfig.setRocketmqHome(dir.toString());
        namesrvConfig.setKvConfigPath(dir.resolve("namesrv").resolve("kvConfig.json").toString());
        NettyServerConfig namesrvServer = new NettyServerConfig();
        namesrvServer.setListenPort(namesrvPort);
        NamesrvController namesrv = new NamesrvController(namesrvConfig, namesrvServer, new NettyClientConfig());
        if (!namesrv.initialize()) {
            throw new IllegalStateException("the name server did not initialise");
        }
        namesrv.start();

        BrokerConfig brokerConfig = new BrokerConfig();
        brokerConfig.setRocketmqHome(dir.toString());
        brokerConfig.setNamesrvAddr("127.0.0.1:" + namesrvPort);
        brokerConfig.setBrokerIP1("127.0.0.1");
        brokerConfig.setBrokerName("broker-a");
        brokerConfig.setBrokerClusterName("laneway");
        brokerConfig.setAutoCreateTopicEnable(false);
        NettyServerConfig brokerServer = new NettyServerConfig();
        brokerServer.setListenPort(Integer.parseInt(args.get("broker-port")));
        MessageStoreConfig store = new MessageStoreConfig();
        store.setStorePathRootDir(dir.resolve("store").toString());
        store.setStorePathCommitLog(dir.resolve("store").resolve("commitlog").toString());
        store.setMappedFileSizeCommitLog(64 * 1024 * 1024);
        store.setMappedFileSizeConsumeQueue(300_000 * 20);
        store.setHaListenPort(brokerServer.getListenPort() + 1);
        BrokerController broker = new BrokerController(brokerConfig, brokerServer, new NettyClientConfig(), store);
        if (!broker.initialize()) {
            throw new IllegalStateException("the broker did not initialise");
        }
        broker.start();
        for (String t : args.getOrDefault("topics", "").split(",")) {
            if (!t.isBlank()) {
                String[] parts = t.split(":");
                int queues = parts.length > 1 ? Integer.parseInt(parts[1]) : 4;
                broker.getTopicConfigManager().updateTopicConfig(new TopicConfig(parts[0], queues, queues));
            }
        }
        broker.registerBrokerAll(true, false, true);
        out.println("READY rocketmq namesrv=" + namesrvPort + " ms=" + (System.currentTimeMillis() - start));
        new CountDownLatch(1).await();
    }

    private Broker() {}
}
