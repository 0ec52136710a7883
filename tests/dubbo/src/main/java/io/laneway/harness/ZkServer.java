package io.laneway.harness;

import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

import org.apache.zookeeper.server.ServerConfig;
import org.apache.zookeeper.server.ZooKeeperServerMain;

/**
 * A standalone ZooKeeper server on 127.0.0.1:PORT (ZooKeeperServerMain with a generated config).
 * Prints {@code READY zk 127.0.0.1:PORT ms=...} once it answers {@code ruok}.
 */
final class ZkServer {
    static void run(Args args) throws Exception {
        int port = args.getInt("port", 2181);
        Path dir = Path.of(args.require("dir")).toAbsolutePath();
        Path data = dir.resolve("data");
        Files.createDirectories(data);

        // Same settings as in zoo.cfg below; set as system properties too so they hold
        // whichever way this ZooKeeper version reads them.
        System.setProperty("zookeeper.admin.enableServer", "false");
        System.setProperty("zookeeper.4lw.commands.whitelist", "ruok,stat");
        System.setProperty("zookeeper.jmx.log4j.disable", "true");
        // Test server: do not fsync every transaction.
        System.setProperty("zookeeper.forceSync", "no");

        Path cfg = dir.resolve("zoo.cfg");
        String conf = String.join("\n",
                "tickTime=2000",
                "initLimit=10",
                "syncLimit=5",
                "dataDir=" + data,
                "clientPort=" + port,
                "clientPortAddress=127.0.0.1",
                "maxClientCnxns=0",
                "admin.enableServer=false",
                "4lw.commands.whitelist=ruok,stat",
                "");
        Files.writeString(cfg, conf);

        ServerConfig config = new ServerConfig();
        config.parse(cfg.toString());
        ZooKeeperServerMain server = new ZooKeeperServerMain();
        Thread t = new Thread(() -> {
            try {
                server.runFromConfig(config);
                System.err.println("zookeeper server stopped");
                System.exit(0);
            } catch (Throwable e) {
                e.printStackTrace();
                System.exit(1);
            }
        }, "zk-server");
        t.start();

        long deadline = System.currentTimeMillis() + 30_000;
        while (System.currentTimeMillis() < deadline) {
            // "ruok" answers imok before the database is loaded; "stat" reports Mode: only when serving
            String stat = fourLetter(port, "stat");
            if (stat != null && stat.contains("Mode: ")) {
                Main.OUT.println("READY zk 127.0.0.1:" + port + " ms=" + (System.currentTimeMillis() - Main.JVM_START));
                t.join();
                return;
            }
            Thread.sleep(50);
        }
        System.err.println("zookeeper did not answer ruok within 30 s");
        System.exit(1);
    }

    static String fourLetter(int port, String cmd) {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress("127.0.0.1", port), 500);
            s.setSoTimeout(1000);
            OutputStream out = s.getOutputStream();
            out.write(cmd.getBytes(StandardCharsets.US_ASCII));
            out.flush();
            InputStream in = s.getInputStream();
            return new String(in.readAllBytes(), StandardCharsets.US_ASCII).trim();
        } catch (Exception e) {
            return null;
        }
    }

    private ZkServer() {}
}
