package io.laneway.harness;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import io.laneway.demo.Hop;
import org.apache.dubbo.config.ReferenceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;
import org.apache.dubbo.rpc.RpcContext;

/**
 * A caller with no gateway in front (a scheduled job): calls --next's {@link Hop} chain from its
 * main thread, serving no request, with laneway's Dubbo filters on the class path. Commands on
 * stdin, one JSON line each:
 *
 * <pre>
 * calls &lt;n&gt; &lt;users&gt; &lt;tag|-&gt;
 *     n calls; with users &gt; 0, call i carries the attachment user_id=(i % users) + 1;
 *     {"cmd":"calls","calls":n,"errors":0,"chains":{"order-gray>user-gray":k,...},"users":{"1":{...}}}
 * await &lt;chain&gt; &lt;all|none&gt; &lt;timeout_ms&gt;
 *     batches of 10 calls in no lane until every call (all) or no call (none) went along chain
 *     ("a>b"); {"cmd":"await","ok":true,"at":&lt;epoch ms the matching batch began&gt;}
 * </pre>
 */
final class Caller {
    private final Hop hop;

    private Caller(Hop hop) {
        this.hop = hop;
    }

    static void run(Args args) throws Exception {
        String next = args.require("next");
        String zk = args.require("zk");
        ReferenceConfig<Hop> ref = Common.hopReference(next);
        var registry = Common.registry(zk);
        registry.setRegister(false);
        DubboBootstrap.getInstance()
                .application(Common.application(args.get("name", "nightly-job"), null))
                .registry(registry)
                .configCenter(Common.configCenter(zk))
                .reference(ref)
                .start();
        Caller caller = new Caller(ref.get());
        Main.OUT.println("READY caller next=" + next + " ms=" + (System.currentTimeMillis() - Main.JVM_START));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null && !line.trim().equals("quit")) {
            String[] w = line.trim().split("\\s+");
            try {
                Main.OUT.println(w[0].equals("await") ? caller.await(w) : caller.calls(w));
            } catch (Exception e) {
                Main.OUT.println("{\"cmd\":" + Common.json(w[0]) + ",\"error\":" + Common.json(String.valueOf(e)) + "}");
            }
        }
        DubboBootstrap.getInstance().stop();
        System.exit(0);
    }

    /** The chain one call went along, or "error". */
    private String call(String user, String tag) {
        try {
            RpcContext.getClientAttachment().clearAttachments();
            if (user != null) {
                RpcContext.getClientAttachment().setAttachment("user_id", user);
            }
            if (tag != null) {
                RpcContext.getClientAttachment().setAttachment("dubbo.tag", tag);
            }
            return String.join(">", hop.serve());
        } catch (Exception e) {
            System.err.println("call failed: " + e);
            return "error";
        } finally {
            RpcContext.getClientAttachment().clearAttachments();
        }
    }

    private String calls(String[] w) {
        int n = Integer.parseInt(w[1]);
        int users = Integer.parseInt(w[2]);
        String tag = w[3].equals("-") ? null : w[3];
        Map<String, Integer> chains = new TreeMap<>();
        Map<String, Map<String, Integer>> byUser = new TreeMap<>();
        for (int i = 0; i < n; i++) {
            String user = users > 0 ? Integer.toString(i % users + 1) : null;
            String chain = call(user, tag);
            chains.merge(chain, 1, Integer::sum);
            if (user != null) {
                byUser.computeIfAbsent(user, u -> new TreeMap<>()).merge(chain, 1, Integer::sum);
            }
        }
        List<String> perUser = new ArrayList<>();
        byUser.forEach((u, c) -> perUser.add(Common.json(u) + ":" + counts(c)));
        return "{\"cmd\":\"calls\",\"calls\":" + n + ",\"errors\":" + chains.getOrDefault("error", 0)
                + ",\"chains\":" + counts(chains) + ",\"users\":{" + String.join(",", perUser) + "}}";
    }

    private String await(String[] w) throws InterruptedException {
        String chain = w[1];
        boolean all = w[2].equals("all");
        long timeout = Long.parseLong(w[3]);
        long start = System.currentTimeMillis();
        long batchStart;
        boolean ok;
        do {
            batchStart = System.currentTimeMillis();
            int along = 0;
            for (int i = 0; i < 10; i++) {
                along += call(null, null).equals(chain) ? 1 : 0;
            }
            ok = all ? along == 10 : along == 0;
            if (!ok) {
                Thread.sleep(2);
            }
        } while (!ok && System.currentTimeMillis() - start < timeout);
        return "{\"cmd\":\"await\",\"ok\":" + ok + ",\"ms\":" + (System.currentTimeMillis() - start)
                + ",\"at\":" + batchStart + "}";
    }

    private static String counts(Map<String, Integer> counts) {
        List<String> parts = new ArrayList<>();
        counts.forEach((k, v) -> parts.add(Common.json(k) + ":" + v));
        return "{" + String.join(",", parts) + "}";
    }
}
