package io.laneway.harness.spring;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** The command line. */
final class Options {
    String nacos;
    String username;
    String password;
    String namespace;
    String group = "DEFAULT_GROUP";
    boolean lbCache;
    boolean lazy = true;
    final List<AppSpec> apps = new ArrayList<>();
    /** Path prefix (no slashes) to service name, for the gateway. */
    final Map<String, String> routes = new LinkedHashMap<>();

    static final String USAGE = String.join("\n",
            "usage: java -jar harness.jar --nacos HOST:PORT [--username U --password P] [--namespace NS]",
            "         [--group G] [--lb-cache on|off] [--lazy on|off]",
            "         [--service NAME@IP:PORT[,next=SERVICE][,lanes=LANE[+LANE...]][,pod=POD]]...",
            "         [--gateway [NAME@]IP:PORT --route PATH=SERVICE...]",
            "stdin: 'stop NAME@IP:PORT', 'start NAME@IP:PORT[,next=SERVICE][,lanes=...]',",
            "       'break NAME@IP:PORT plain|pool|-' (its next call through a client without laneway's,",
            "       from a bare thread pool, or as it should), 'quit'");

    static Options parse(String[] argv) {
        Options o = new Options();
        AppSpec gateway = null;
        for (int i = 0; i < argv.length; i++) {
            String flag = argv[i];
            if (i + 1 >= argv.length) {
                throw new IllegalArgumentException(flag + " wants a value");
            }
            String value = argv[++i];
            switch (flag) {
                case "--nacos" -> o.nacos = value;
                case "--username" -> o.username = value;
                case "--password" -> o.password = value;
                case "--namespace" -> o.namespace = value;
                case "--group" -> o.group = value;
                case "--lb-cache" -> o.lbCache = onOff(flag, value);
                case "--lazy" -> o.lazy = onOff(flag, value);
                case "--service" -> o.apps.add(AppSpec.service(value));
                case "--gateway" -> {
                    if (gateway != null) {
                        throw new IllegalArgumentException("one --gateway only");
                    }
                    gateway = AppSpec.gateway(value);
                }
                case "--route" -> {
                    int eq = value.indexOf('=');
                    String path = eq > 0 ? value.substring(0, eq).replaceAll("^/+|/+$", "") : "";
                    if (path.isEmpty() || eq == value.length() - 1) {
                        throw new IllegalArgumentException("--route wants PATH=SERVICE, not " + value);
                    }
                    o.routes.put(path, value.substring(eq + 1));
                }
                default -> throw new IllegalArgumentException("unknown option " + flag);
            }
        }
        if (o.nacos == null) {
            throw new IllegalArgumentException("--nacos HOST:PORT is required");
        }
        if ((o.username == null) != (o.password == null)) {
            throw new IllegalArgumentException("--username and --password go together");
        }
        if (gateway != null) {
            o.apps.add(gateway);
        } else if (!o.routes.isEmpty()) {
            throw new IllegalArgumentException("--route without --gateway");
        }
        if (o.apps.isEmpty()) {
            throw new IllegalArgumentException("nothing to run: give --service or --gateway");
        }
        return o;
    }

    private static boolean onOff(String flag, String value) {
        return switch (value) {
            case "on" -> true;
            case "off" -> false;
            default -> throw new IllegalArgumentException(flag + " is on or off, not " + value);
        };
    }
}
