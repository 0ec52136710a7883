package io.laneway.harness;

import java.util.HashMap;
import java.util.Map;

/** Minimal "--key value" / "--flag" parser. */
final class Args {
    private final Map<String, String> values = new HashMap<>();

    Args(String[] argv, int from) {
        for (int i = from; i < argv.length; i++) {
            String a = argv[i];
            if (!a.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument: " + a);
            }
            String key = a.substring(2);
            int eq = key.indexOf('=');
            if (eq >= 0) {
                values.put(key.substring(0, eq), key.substring(eq + 1));
            } else if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) {
                values.put(key, argv[++i]);
            } else {
                values.put(key, "true");
            }
        }
    }

    String get(String key, String def) {
        return values.getOrDefault(key, def);
    }

    String require(String key) {
        String v = values.get(key);
        if (v == null || v.isEmpty()) {
            throw new IllegalArgumentException("missing --" + key);
        }
        return v;
    }

    int getInt(String key, int def) {
        String v = values.get(key);
        return v == null ? def : Integer.parseInt(v);
    }

    boolean has(String key) {
        return values.containsKey(key);
    }
}
