package io.laneway.harness;

import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;

/**
 * Raw znode access for tests: write bytes (creating parents), delete, read.
 * Prints {@code WROTE <path> <bytes> <ack_ms> <sent_ms>} / {@code DELETED <path> <ack_ms> <sent_ms>}
 * (epoch ms when the server acknowledged the change / when the request was sent; watchers may be
 * notified before the writer sees the ack), or the raw data for zkget.
 */
final class ZkTool {
    static int run(String role, Args args) throws Exception {
        String connect = args.require("zk");
        String path = args.require("path");
        CountDownLatch connected = new CountDownLatch(1);
        ZooKeeper zk = new ZooKeeper(connect, 10_000, e -> {
            if (e.getState() == Watcher.Event.KeeperState.SyncConnected) {
                connected.countDown();
            }
        });
        try {
            if (!connected.await(15, TimeUnit.SECONDS)) {
                System.err.println("cannot connect to zookeeper at " + connect);
                return 1;
            }
            switch (role) {
                case "zkput": {
                    byte[] data;
                    if (args.has("file")) {
                        data = Files.readAllBytes(Path.of(args.get("file", "")));
                    } else {
                        InputStream in = System.in;
                        data = in.readAllBytes();
                    }
                    long sent = System.currentTimeMillis();
                    if (zk.exists(path, false) == null) {
                        createParents(zk, path);
                        try {
                            zk.create(path, data, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
                        } catch (KeeperException.NodeExistsException e) {
                            zk.setData(path, data, -1);
                        }
                    } else {
                        zk.setData(path, data, -1);
                    }
                    Main.OUT.println("WROTE " + path + " " + data.length + " " + System.currentTimeMillis() + " " + sent);
                    return 0;
                }
                case "zkdel": {
                    long sent = System.currentTimeMillis();
                    try {
                        zk.delete(path, -1);
                        Main.OUT.println("DELETED " + path + " " + System.currentTimeMillis() + " " + sent);
                    } catch (KeeperException.NoNodeException e) {
                        Main.OUT.println("ABSENT " + path + " " + System.currentTimeMillis() + " " + sent);
                    }
                    return 0;
                }
                case "zkget": {
                    try {
                        byte[] data = zk.getData(path, false, null);
                        Main.OUT.print(data == null ? "" : new String(data, StandardCharsets.UTF_8));
                        Main.OUT.flush();
                        return 0;
                    } catch (KeeperException.NoNodeException e) {
                        System.err.println("no node " + path);
                        return 3;
                    }
                }
                default:
                    throw new IllegalArgumentException(role);
            }
        } finally {
            zk.close();
        }
    }

    private static void createParents(ZooKeeper zk, String path) throws Exception {
        int idx = 0;
        while ((idx = path.indexOf('/', idx + 1)) > 0) {
            String parent = path.substring(0, idx);
            if (zk.exists(parent, false) == null) {
                try {
                    zk.create(parent, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
                } catch (KeeperException.NodeExistsException ignored) {
                    // created concurrently
                }
            }
        }
    }

    private ZkTool() {}
}
