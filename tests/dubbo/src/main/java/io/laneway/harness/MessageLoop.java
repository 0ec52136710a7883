package io.laneway.harness;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

import io.laneway.demo.Hop;
import io.laneway.lane.Lane;
import org.apache.dubbo.config.ReferenceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;

/**
 * What the message roles share: the producer's commands on stdin, the consumer's
 * Dubbo side (ZooKeeper as registry and config centre, a reference to --next's {@link Hop}) and
 * the line it prints for each message handled.
 *
 * <pre>
 * producer stdin: produce &lt;n&gt; &lt;lane|-&gt; &lt;prefix&gt; &lt;per_second|0&gt;
 *     n messages valued prefix-0 .. prefix-(n-1), sent while serving a request in lane (- : none,
 *     so the pod's own lane goes on); {"cmd":"produce","n":n,"first":ms,"last":ms}
 * consumer stdout, per message handled:
 *     {"h":"prefix-i","lane":"..."|null,"by":"ID","chain":"user-0","born":ms,"at":ms}
 * </pre>
 */
final class MessageLoop {
    /** Sends one message valued {@code value}. */
    interface Send {
        void send(String value) throws Exception;
    }

    /** Runs the producer's commands until stdin ends; {@code flush} after each. */
    static void produce(String role, Send send, Runnable flush) throws Exception {
        Main.OUT.println("READY " + role + " ms=" + (System.currentTimeMillis() - Main.JVM_START));
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
                    long wait = first + i * 1000L / perSecond - System.currentTimeMillis();
                    if (wait > 0) {
                        Thread.sleep(wait);
                    }
                }
                String previous = Lane.set(lane);
                try {
                    send.send(w[3] + "-" + i);
                } finally {
                    Lane.restore(previous);
                }
            }
            flush.run();
            Main.OUT.println("{\"cmd\":\"produce\",\"n\":" + n + ",\"first\":" + first
                    + ",\"last\":" + System.currentTimeMillis() + "}");
        }
        System.exit(0);
    }

    /** Dubbo for a consumer pod of --app, calling --next's Hop; ZooKeeper (--zk) is its config centre. */
    static Hop dubbo(Args args) {
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
        return ref.get();
    }

    /** Calls {@code next}'s chain (in the lane current on this thread) and prints the message's line. */
    static void handled(String id, Hop next, String value, String lane, long born) {
        String chain;
        try {
            chain = String.join(">", next.serve());
        } catch (RuntimeException e) {
            System.err.println("call failed: " + e);
            chain = "error";
        }
        Main.OUT.println("{\"h\":" + Common.json(value)
                + ",\"lane\":" + (lane == null ? "null" : Common.json(lane))
                + ",\"by\":" + Common.json(id) + ",\"chain\":" + Common.json(chain)
                + ",\"born\":" + born + ",\"at\":" + System.currentTimeMillis() + "}");
    }

    private MessageLoop() {}
}
