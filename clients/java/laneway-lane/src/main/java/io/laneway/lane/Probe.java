package io.laneway.lane;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A probed request ({@code kubectl laneway probe}): a request carrying a probe mark makes every
 * hop that serves it record a hop record (its application, pod, the lane it carried there, how it
 * learnt it, and the pod's own lane), and answer with its record followed by those its onward
 * calls answered with.
 *
 * <p>Integrations {@link #begin} a probe when a request with a mark arrives and {@link #end} it
 * when the request leaves; clients ask {@link #forCall()} which probe an outgoing call belongs
 * to, carry its mark on, and {@link #collect} what the call answered with.
 *
 * <p>A call made on a thread that serves no request (a bare thread pool) while exactly one probe
 * is in flight in this process is attributed to that probe: it carries the mark (but no lane, as
 * the lane was lost there), so the probe shows the hop that answered it in no lane.
 */
public final class Probe {
    /** The request header (and Dubbo attachment) that carries the probe mark. */
    public static final String MARK = "laneway-probe";
    /** The response header (and Dubbo attachment) that carries the hop records back. */
    public static final String HOPS = "laneway-hops";
    /** System property naming this pod (else env {@code POD_NAME}, else {@code HOSTNAME}). */
    public static final String POD_PROPERTY = "laneway.pod.name";
    /**
     * System property naming this application in hop records where the integration knows no name
     * of its own (else env {@code LANEWAY_APPLICATION}).
     */
    public static final String APPLICATION_PROPERTY = "laneway.application";

    private static final int MAX_MARK = 64;
    private static final int MAX_HOPS = 64;
    private static final ThreadLocal<Probe> CURRENT = new ThreadLocal<>();
    private static final Set<Probe> IN_FLIGHT = ConcurrentHashMap.newKeySet();

    private final String mark;
    private final List<String> records = new ArrayList<>();
    private Probe outer;

    private Probe(String mark) {
        this.mark = mark;
    }

    /**
     * Starts serving a request with probe mark {@code mark} on this thread, recording this hop;
     * returns {@code null} (and records nothing) for a request without a valid mark. The probe
     * must be given to {@link #end} in a {@code finally} block.
     *
     * @param app the application or service that serves it ({@code null}: {@value #APPLICATION_PROPERTY})
     * @param pod the pod that serves it ({@code null}: {@value #POD_PROPERTY})
     * @param lane the lane the request carried, {@code null} for none
     * @param learnt how the lane was learnt: {@code header}, {@code baggage}, {@code tag}, or
     *     {@code null} when the request carried none (then the pod's own lane, if any, is the lane
     *     this hop carries on: {@code own}; else {@code none})
     */
    public static Probe begin(String mark, String app, String pod, String lane, String learnt) {
        if (!isValidMark(mark)) {
            return null;
        }
        Carried c = Carried.of(lane, learnt);
        Probe probe = new Probe(mark);
        probe.records.add(record(app != null ? app : setting(APPLICATION_PROPERTY, "LANEWAY_APPLICATION"),
                pod != null ? pod : pod(), c.lane(), c.learnt(), c.own()));
        probe.outer = CURRENT.get();
        IN_FLIGHT.add(probe);
        CURRENT.set(probe);
        return probe;
    }

    /** Ends what {@link #begin} started, on the same thread (nothing for {@code null}). */
    public static void end(Probe probe) {
        if (probe != null) {
            IN_FLIGHT.remove(probe);
            if (probe.outer != null) {
                CURRENT.set(probe.outer);
            } else {
                CURRENT.remove();
            }
        }
    }

    /**
     * The probe an outgoing call made on this thread belongs to: the one this thread serves, else,
     * on a thread that serves no request, the only probe in flight in this process; else
     * {@code null}.
     */
    public static Probe forCall() {
        Probe probe = CURRENT.get();
        if (probe != null || Lane.serving() || IN_FLIGHT.size() != 1) {
            return probe;
        }
        for (Probe only : IN_FLIGHT) {
            return only;
        }
        return null;
    }

    /** The mark to carry on. */
    public String mark() {
        return mark;
    }

    /** Adds the hop records an onward call answered with ({@link #hops()} of the next hop). */
    public void collect(String hops) {
        if (hops == null) {
            return;
        }
        String list = hops.trim();
        if (list.length() < 2 || list.charAt(0) != '[' || list.charAt(list.length() - 1) != ']') {
            return;
        }
        String inner = list.substring(1, list.length() - 1).trim();
        synchronized (records) {
            if (!inner.isEmpty() && records.size() < MAX_HOPS) {
                records.add(inner);
            }
        }
    }

    /** This hop's record and every record collected, as a JSON array. */
    public String hops() {
        synchronized (records) {
            return "[" + String.join(",", records) + "]";
        }
    }

    static boolean isValidMark(String mark) {
        if (mark == null || mark.isEmpty() || mark.length() > MAX_MARK) {
            return false;
        }
        for (int i = 0; i < mark.length(); i++) {
            char c = mark.charAt(i);
            if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9') && c != '-') {
                return false;
            }
        }
        return true;
    }

    static String pod() {
        String pod = setting(POD_PROPERTY, "POD_NAME");
        return pod != null ? pod : System.getenv("HOSTNAME");
    }

    private static String setting(String property, String env) {
        String value = System.getProperty(property);
        if (value == null || value.isEmpty()) {
            value = System.getenv(env);
        }
        return value == null || value.isEmpty() ? null : value;
    }

    static String record(String app, String pod, String lane, String learnt, String own) {
        StringBuilder b = new StringBuilder("{");
        field(b, "app", app).append(',');
        field(b, "pod", pod).append(',');
        field(b, "lane", lane).append(',');
        field(b, "learnt", learnt).append(',');
        return field(b, "own", own).append('}').toString();
    }

    private static StringBuilder field(StringBuilder b, String name, String value) {
        b.append('"').append(name).append("\":");
        if (value == null) {
            return b.append("null");
        }
        b.append('"');
        for (int i = 0; i < value.length(); i++) {
            char c = value.charAt(i);
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"');
    }
}
