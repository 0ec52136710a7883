package io.laneway.lane;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;

/**
 * The lane in a W3C {@code baggage} header ({@code lane=dev-alice}), so that services
 * instrumented with OpenTelemetry carry their lane with no header of their own.
 *
 * <p>Strict: a list member that does not follow the W3C grammar (a token key, {@code =}, a value
 * of baggage octets with valid percent-encoding, well-formed {@code ;} properties) is skipped,
 * and nothing here throws. Among the well-formed members, the first one with the key decides; its
 * value is the lane only if it is a {@link Lane#isValid valid lane}, so a garbage header never
 * becomes a Dubbo tag.
 */
public final class Baggage {
    /** The baggage key that names the lane. */
    public static final String DEFAULT_KEY = "lane";

    private Baggage() {}

    /** The lane under key {@value #DEFAULT_KEY} in a {@code baggage} header value, or {@code null}. */
    public static String lane(String header) {
        return lane(header, DEFAULT_KEY);
    }

    /** The lane under {@code key} in a {@code baggage} header value, or {@code null}. */
    public static String lane(String header, String key) {
        return Lane.validOrNull(find(header, key));
    }

    /**
     * The percent-decoded value of the first well-formed list member with {@code key}, whatever it
     * is, or {@code null}; see {@link #lane(String, String)} for a lane.
     */
    public static String find(String header, String key) {
        if (header == null || key == null || key.isEmpty()) {
            return null;
        }
        int n = header.length();
        int start = 0;
        while (start <= n) {
            int end = header.indexOf(',', start);
            if (end < 0) {
                end = n;
            }
            int found = member(header, start, end, key);
            if (found == FOUND) {
                return value(header, start, end);
            }
            start = end + 1;
        }
        return null;
    }

    private static final int SKIP = 0;
    private static final int FOUND = 1;

    // FOUND when header[from, to) is a well-formed list member whose key is key
    private static int member(String h, int from, int to, String key) {
        int semi = indexOf(h, ';', from, to);
        int propsFrom = semi < 0 ? to : semi;
        int eq = indexOf(h, '=', from, propsFrom);
        if (eq < 0) {
            return SKIP;
        }
        int ks = skipOws(h, from, eq);
        int ke = trimOws(h, ks, eq);
        if (ke - ks != key.length() || !h.regionMatches(ks, key, 0, key.length()) || !isToken(h, ks, ke)) {
            return SKIP;
        }
        int vs = skipOws(h, eq + 1, propsFrom);
        int ve = trimOws(h, vs, propsFrom);
        if (!isValue(h, vs, ve) || !isPercentEncoded(h, vs, ve)) {
            return SKIP;
        }
        return semi < 0 || properties(h, semi, to) ? FOUND : SKIP;
    }

    // h[from, to) starts with ';': every property is "key" or "key = value"
    private static boolean properties(String h, int from, int to) {
        int start = from;
        while (start < to) {
            int end = indexOf(h, ';', start + 1, to);
            if (end < 0) {
                end = to;
            }
            int ps = start + 1;
            int eq = indexOf(h, '=', ps, end);
            int ks = skipOws(h, ps, eq < 0 ? end : eq);
            int ke = trimOws(h, ks, eq < 0 ? end : eq);
            if (ke == ks || !isToken(h, ks, ke)) {
                return false;
            }
            if (eq >= 0) {
                int vs = skipOws(h, eq + 1, end);
                int ve = trimOws(h, vs, end);
                if (!isValue(h, vs, ve)) {
                    return false;
                }
            }
            start = end;
        }
        return true;
    }

    // the member is known to be well-formed here
    private static String value(String h, int from, int to) {
        int semi = indexOf(h, ';', from, to);
        int end = semi < 0 ? to : semi;
        int eq = indexOf(h, '=', from, end);
        int vs = skipOws(h, eq + 1, end);
        int ve = trimOws(h, vs, end);
        if (vs == ve) {
            return null;
        }
        if (indexOf(h, '%', vs, ve) < 0) {
            return h.substring(vs, ve);
        }
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(ve - vs);
        for (int i = vs; i < ve; i++) {
            char c = h.charAt(i);
            if (c == '%') {
                bytes.write(Character.digit(h.charAt(i + 1), 16) << 4 | Character.digit(h.charAt(i + 2), 16));
                i += 2;
            } else {
                bytes.write(c);
            }
        }
        return new String(bytes.toByteArray(), StandardCharsets.UTF_8);
    }

    private static boolean isPercentEncoded(String h, int from, int to) {
        for (int i = from; i < to; i++) {
            if (h.charAt(i) == '%') {
                if (i + 2 >= to || Character.digit(h.charAt(i + 1), 16) < 0
                        || Character.digit(h.charAt(i + 2), 16) < 0) {
                    return false;
                }
                i += 2;
            }
        }
        return true;
    }

    // baggage-octet = %x21 / %x23-2B / %x2D-3A / %x3C-5B / %x5D-7E
    private static boolean isValue(String h, int from, int to) {
        for (int i = from; i < to; i++) {
            char c = h.charAt(i);
            if (c < 0x21 || c > 0x7e || c == '"' || c == ',' || c == ';' || c == '\\') {
                return false;
            }
        }
        return true;
    }

    // RFC 7230 token
    private static boolean isToken(String h, int from, int to) {
        if (from == to) {
            return false;
        }
        for (int i = from; i < to; i++) {
            char c = h.charAt(i);
            boolean ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                    || "!#$%&'*+-.^_`|~".indexOf(c) >= 0;
            if (!ok) {
                return false;
            }
        }
        return true;
    }

    // bounded by to, so that a long header costs linear time
    private static int indexOf(String h, char c, int from, int to) {
        for (int i = from; i < to; i++) {
            if (h.charAt(i) == c) {
                return i;
            }
        }
        return -1;
    }

    private static int skipOws(String h, int from, int to) {
        while (from < to && (h.charAt(from) == ' ' || h.charAt(from) == '\t')) {
            from++;
        }
        return from;
    }

    private static int trimOws(String h, int from, int to) {
        while (to > from && (h.charAt(to - 1) == ' ' || h.charAt(to - 1) == '\t')) {
            to--;
        }
        return to;
    }
}
