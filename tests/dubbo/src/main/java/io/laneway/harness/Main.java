package io.laneway.harness;

import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

/**
 * Entry point: {@code java -jar harness.jar <role> [--options]}.
 *
 * <p>Roles: zk, provider, consumer, caller, hop, bff, kproducer, kconsumer, kdrain, rproducer, rconsumer, zkput, zkdel, zkget. Only protocol lines (READY ..., JSON)
 * go to stdout; everything else (Dubbo, Curator, ZooKeeper logs) goes to stderr.
 */
public final class Main {
    /** The real stdout, for protocol lines only. */
    static final PrintStream OUT =
            new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);

    static final long JVM_START = System.currentTimeMillis();

    public static void main(String[] argv) throws Exception {
        // Everything that libraries print goes to stderr; stdout is ours.
        System.setOut(System.err);
        // Dubbo: log through slf4j (slf4j-simple, configured in simplelogger.properties → stderr).
        setDefault("dubbo.application.logger", "slf4j");
        // Graceful shutdown of a provider: do not wait the default 10 s.
        setDefault("dubbo.service.shutdown.wait", "2000");

        if (argv.length == 0) {
            usage();
            System.exit(2);
        }
        String role = argv[0];
        try {
            switch (role) {
                case "zk":
                    ZkServer.run(new Args(argv, 1));
                    break;
                case "provider":
                    Provider.run(new Args(argv, 1));
                    break;
                case "consumer":
                    Consumer.run(new Args(argv, 1));
                    break;
                case "caller":
                    Caller.run(new Args(argv, 1));
                    break;
                case "hop":
                    HopProvider.run(labelled(new Args(argv, 1)));
                    break;
                case "bff":
                    Bff.run(labelled(new Args(argv, 1)));
                    break;
                case "kproducer":
                    KafkaRoles.producer(labelled(new Args(argv, 1)));
                    break;
                case "kconsumer":
                    KafkaRoles.consumer(labelled(new Args(argv, 1)));
                    break;
                case "kdrain":
                    KafkaRoles.drain(new Args(argv, 1));
                    break;
                case "rproducer":
                    RocketRoles.producer(labelled(new Args(argv, 1)));
                    break;
                case "rconsumer":
                    RocketRoles.consumer(labelled(new Args(argv, 1)));
                    break;

                case "zkput":
                case "zkdel":
                case "zkget":
                    System.exit(ZkTool.run(role, new Args(argv, 1)));
                    break;
                default:
                    usage();
                    System.exit(2);
            }
        } catch (IllegalArgumentException e) {
            System.err.println("error: " + e.getMessage());
            usage();
            System.exit(2);
        }
    }

    /**
     * --labels FILE: the pod's downward-API labels file, read by laneway's OwnLane; --id names the
     * pod and --app the application in the hop records of probed requests.
     */
    private static Args labelled(Args args) {
        if (args.has("labels")) {
            System.setProperty("laneway.labels.file", args.require("labels"));
        }
        if (args.has("id")) {
            System.setProperty("laneway.pod.name", args.require("id"));
        }
        System.setProperty("laneway.application", args.get("app", "gateway-bff"));
        return args;
    }

    private static void setDefault(String key, String value) {
        if (System.getProperty(key) == null) {
            System.setProperty(key, value);
        }
    }

    private static void usage() {
        System.err.println(String.join("\n",
                "usage: java -jar harness.jar <role> [options]",
                "  zk       --port P --dir DATA_DIR",
                "  provider --app APP --id ID --ip POD_IP --port P --zk HOST:PORT   (POD_IP not 127.x)",
                "           [--tag STATIC_TAG] [--mode interface|instance|all] [--group G]",
                "  consumer --app APP --zk HOST:PORT [--mode interface|instance|auto] [--group G]",
                "           [--name CONSUMER_APP] [--timeout MS] [--exec 'cmd; cmd; ...']",
                "           stdin commands: call <tag|-> <n> [force] | await <tag|-> <id,id|error> <timeout_ms> [force]",
                "                           | sleep <ms> | quit",
                "  caller   --next APP --zk HOST:PORT   (calls APP's Hop chain outside any request; see Caller)",
                "  hop      --app APP --id ID --ip POD_IP --port P --zk HOST:PORT [--next APP] [--labels FILE]",
                "           [--break-file FILE]   (FILE holding plain or pool: the onward call loses the lane)",
                "  bff      --id ID --ip POD_IP --http-port P --zk HOST:PORT --next APP [--labels FILE] [--header x-lane]",
                "  kproducer --bootstrap HOST:PORT --topic T [--labels FILE]   (see KafkaRoles)",
                "  kconsumer --id ID --bootstrap HOST:PORT --topic T --group G --zk HOST:PORT --app APP --next APP [--labels FILE]",
                "  kdrain   --bootstrap HOST:PORT --topic T --group G [--tier LANE --messages FILE]",
                "  rproducer --namesrv HOST:PORT --topic T [--labels FILE]   (see RocketRoles)",
                "  rconsumer --id ID --namesrv HOST:PORT --topic T --group G --zk HOST:PORT --app APP --next APP [--labels FILE]",
                "  zkput    --zk HOST:PORT --path /znode [--file F]   (stdin when no --file)",
                "  zkdel    --zk HOST:PORT --path /znode",
                "  zkget    --zk HOST:PORT --path /znode"));
    }

    private Main() {}
}
