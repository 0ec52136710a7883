package io.laneway.harness;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

import io.laneway.demo.Echo;
import org.apache.dubbo.config.ReferenceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;
import org.apache.dubbo.rpc.RpcContext;

/**
 * A long-running consumer of io.laneway.demo.Echo of application --app. Reads commands from stdin
 * (or --exec 'a; b; c') and prints one JSON line per command:
 *
 * <pre>
 * call &lt;tag|-&gt; &lt;n&gt; [force]
 *     n calls; {"cmd":"call","tag":"gray","force":false,"calls":20,"by":{"p2":20},"errors":0,"outcomes":"p2"}
 *     ("outcomes": sorted ids that answered, plus "error" if any call failed)
 * await &lt;tag|-&gt; &lt;id,id,...|error&gt; &lt;timeout_ms&gt; [force]
 *     repeats batches of calls until one batch's outcomes are exactly the given set ("error" = a
 *     failed call); {"cmd":"await",...,"ok":true,"ms":..,"at":&lt;epoch ms the matching batch began&gt;}
 * sleep &lt;ms&gt;
 * quit
 * </pre>
 */
final class Consumer {
    private static final String TAG_KEY = "dubbo.tag";
    private static final String FORCE_TAG_KEY = "dubbo.force.tag";

    private final Echo echo;

    private Consumer(Echo echo) {
        this.echo = echo;
    }

    static void run(Args args) throws Exception {
        String app = args.require("app");
        String zk = args.require("zk");
        String name = args.get("name", "laneway-consumer");
        String group = args.get("group", app);
        // interface → FORCE_INTERFACE, instance → FORCE_APPLICATION, auto → APPLICATION_FIRST
        String mode = args.get("mode", "interface");
        int timeout = args.getInt("timeout", 1000);

        String step;
        switch (mode) {
            case "interface": step = "FORCE_INTERFACE"; break;
            case "instance": step = "FORCE_APPLICATION"; break;
            case "auto": step = "APPLICATION_FIRST"; break;
            default: throw new IllegalArgumentException("--mode interface|instance|auto");
        }

        ReferenceConfig<Echo> ref = new ReferenceConfig<>();
        ref.setInterface(Echo.class);
        if (!group.isEmpty()) {
            ref.setGroup(group);
        }
        ref.setProvidedBy(app); // application-level discovery: no service-name mapping needed
        ref.setCheck(false);
        ref.setTimeout(timeout);
        ref.setRetries(0); // one call = one routing decision = one answer or one error
        ref.setLoadbalance("roundrobin"); // deterministic spread over the routed providers
        Map<String, String> params = new HashMap<>();
        params.put("migration.step", step);
        ref.setParameters(params);

        var registry = Common.registry(zk);
        registry.setRegister(false); // the consumer only subscribes
        DubboBootstrap.getInstance()
                .application(Common.application(name, null))
                .registry(registry)
                .configCenter(Common.configCenter(zk))
                .reference(ref)
                .start();

        Consumer consumer = new Consumer(ref.get());
        Main.OUT.println("READY consumer app=" + app + " mode=" + mode
                + " ms=" + (System.currentTimeMillis() - Main.JVM_START));

        if (args.has("exec")) {
            for (String cmd : args.get("exec", "").split(";")) {
                if (!consumer.handle(cmd.trim())) {
                    break;
                }
            }
        } else {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null) {
                if (!consumer.handle(line.trim())) {
                    break;
                }
            }
        }
        DubboBootstrap.getInstance().stop();
        System.exit(0);
    }

    /** Returns false on quit. */
    private boolean handle(String line) {
        if (line.isEmpty() || line.startsWith("#")) {
            return true;
        }
        List<String> w = Arrays.asList(line.split("\\s+"));
        try {
            switch (w.get(0)) {
                case "call": {
                    String tag = w.get(1);
                    int n = Integer.parseInt(w.get(2));
                    boolean force = w.size() > 3 && w.get(3).equals("force");
                    Batch b = batch(tag, n, force);
                    Main.OUT.println("{\"cmd\":\"call\",\"tag\":" + Common.json(tag) + ",\"force\":" + force
                            + "," + b.json() + "}");
                    return true;
                }
                case "await": {
                    String tag = w.get(1);
                    Set<String> want = new TreeSet<>(Arrays.asList(w.get(2).split(",")));
                    long timeout = Long.parseLong(w.get(3));
                    boolean force = w.size() > 4 && w.get(4).equals("force");
                    int size = Math.max(6, 3 * want.size());
                    long start = System.currentTimeMillis();
                    int batches = 0;
                    Batch b;
                    long batchStart;
                    boolean ok;
                    do {
                        batchStart = System.currentTimeMillis();
                        b = batch(tag, size, force);
                        batches++;
                        ok = b.outcomes().equals(want);
                        if (!ok) {
                            Thread.sleep(2);
                        }
                    } while (!ok && System.currentTimeMillis() - start < timeout);
                    Main.OUT.println("{\"cmd\":\"await\",\"tag\":" + Common.json(tag) + ",\"force\":" + force
                            + ",\"want\":" + Common.json(String.join(",", want)) + ",\"ok\":" + ok
                            + ",\"ms\":" + (System.currentTimeMillis() - start) + ",\"at\":" + batchStart
                            + ",\"batches\":" + batches + ",\"last\":{" + b.json() + "}}");
                    return true;
                }
                case "sleep":
                    Thread.sleep(Long.parseLong(w.get(1)));
                    Main.OUT.println("{\"cmd\":\"sleep\"}");
                    return true;
                case "quit":
                    return false;
                default:
                    Main.OUT.println("{\"cmd\":" + Common.json(w.get(0)) + ",\"error\":\"unknown command\"}");
                    return true;
            }
        } catch (Exception e) {
            Main.OUT.println("{\"cmd\":" + Common.json(w.get(0)) + ",\"error\":" + Common.json(String.valueOf(e)) + "}");
            return true;
        }
    }

    private Batch batch(String tag, int n, boolean force) {
        Batch b = new Batch();
        for (int i = 0; i < n; i++) {
            b.calls++;
            try {
                RpcContext.getClientAttachment().clearAttachments();
                if (!tag.equals("-")) {
                    RpcContext.getClientAttachment().setAttachment(TAG_KEY, tag);
                }
                if (force) {
                    RpcContext.getClientAttachment().setAttachment(FORCE_TAG_KEY, "true");
                }
                b.by.merge(echo.whoami(), 1, Integer::sum);
            } catch (Exception e) {
                b.errors++;
                if (b.firstError == null) {
                    String msg = String.valueOf(e.getMessage());
                    b.firstError = e.getClass().getSimpleName() + ": "
                            + (msg.length() > 200 ? msg.substring(0, 200) : msg);
                }
            } finally {
                RpcContext.getClientAttachment().clearAttachments();
            }
        }
        return b;
    }

    private static final class Batch {
        int calls;
        int errors;
        String firstError;
        final Map<String, Integer> by = new TreeMap<>();

        Set<String> outcomes() {
            Set<String> s = new TreeSet<>(by.keySet());
            if (errors > 0) {
                s.add("error");
            }
            return s;
        }

        String json() {
            List<String> parts = new ArrayList<>();
            by.forEach((k, v) -> parts.add(Common.json(k) + ":" + v));
            return "\"calls\":" + calls + ",\"by\":{" + String.join(",", parts) + "},\"errors\":" + errors
                    + ",\"outcomes\":" + Common.json(String.join(",", outcomes()))
                    + (firstError == null ? "" : ",\"error\":" + Common.json(firstError));
        }
    }
}
