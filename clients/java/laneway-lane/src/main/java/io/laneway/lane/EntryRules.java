package io.laneway.lane;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32;

/**
 * The lanes a call in no lane may enter at an RPC entry, as laneway publishes them per application
 * (key {@code <application>.laneway-entry}, group {@code dubbo}): each lane with its weight, the
 * conditions that let a call in whatever the weight, and the key a sticky draw hashes.
 *
 * <p>A draw looks at the conditions of every lane first (lanes in the document's order, which is
 * by name); a call that meets none is then drawn by weight: the lanes share {@code [0, 100)} in
 * order, each its weight wide, and a call enters the lane whose share holds its roll. The roll is
 * {@code crc32(value) % 100} of the lane's sticky key (UTF-8), so every call with the same value is
 * in or out on every call and every service; a call without that key is not drawn into a sticky
 * lane. Without a sticky key the roll is random per call.
 */
public final class EntryRules {
    /** Draws nothing. */
    public static final EntryRules NONE = new EntryRules(new EntryLane[0]);

    /** What a draw reads of a call; {@code null} where the call has no such thing. */
    public interface Call {
        /** A Dubbo attachment. */
        default String attachment(String key) {
            return null;
        }

        /** A Dubbo method argument, as text. */
        default String argument(int index) {
            return null;
        }

        /** A request header (case-insensitive). */
        default String header(String name) {
            return null;
        }
    }

    // arrays, not lists: a draw allocates no iterator
    private final EntryLane[] lanes;

    private EntryRules(EntryLane[] lanes) {
        this.lanes = lanes;
    }

    /**
     * The rules in a parsed document: a map with a {@code lanes} list, as a YAML or JSON parser
     * returns it. Throws {@link IllegalArgumentException} for a document of another shape.
     */
    public static EntryRules of(Object document) {
        Object lanes = map(document).get("lanes");
        if (lanes == null) {
            return NONE;
        }
        if (!(lanes instanceof List)) {
            throw new IllegalArgumentException("lanes is not a list");
        }
        List<EntryLane> parsed = new ArrayList<>();
        for (Object lane : (List<?>) lanes) {
            parsed.add(EntryLane.of(map(lane)));
        }
        return parsed.isEmpty() ? NONE : new EntryRules(parsed.toArray(new EntryLane[0]));
    }

    /** Whether no call is ever drawn. */
    public boolean isEmpty() {
        return lanes.length == 0;
    }

    /**
     * The lane {@code call} enters, or {@code null} (baseline). {@code roll} is a random number in
     * {@code [0, 100)}, used by the lanes without a sticky key.
     */
    public String draw(Call call, int roll) {
        for (EntryLane lane : lanes) {
            if (lane.meets(call)) {
                return lane.name;
            }
        }
        int from = 0;
        for (EntryLane lane : lanes) {
            if (lane.weight > 0) {
                int r = lane.roll(call, roll);
                if (r >= from && r < from + lane.weight) {
                    return lane.name;
                }
                from += lane.weight;
            }
        }
        return null;
    }

    /** {@code crc32(UTF-8 bytes of value) % 100}: where a sticky draw puts a value. */
    public static int stickyRoll(String value) {
        CRC32 crc = new CRC32();
        crc.update(value.getBytes(StandardCharsets.UTF_8));
        return (int) (crc.getValue() % 100);
    }

    static Map<?, ?> map(Object value) {
        if (!(value instanceof Map)) {
            throw new IllegalArgumentException("not a mapping: " + value);
        }
        return (Map<?, ?>) value;
    }

    static String text(Map<?, ?> map, String key) {
        Object value = map.get(key);
        return value == null ? null : value.toString();
    }

    private static final class EntryLane {
        final String name;
        final int weight;
        final String stickyAttachment;
        final String stickyHeader;
        final Condition[] conditions;

        private EntryLane(String name, int weight, String stickyAttachment, String stickyHeader,
                Condition[] conditions) {
            this.name = name;
            this.weight = weight;
            this.stickyAttachment = stickyAttachment;
            this.stickyHeader = stickyHeader;
            this.conditions = conditions;
        }

        static EntryLane of(Map<?, ?> lane) {
            String name = Lane.validOrNull(text(lane, "name"));
            if (name == null) {
                throw new IllegalArgumentException("a lane without a valid name");
            }
            Object weight = lane.get("weight");
            int w = weight instanceof Number ? Math.max(0, Math.min(100, ((Number) weight).intValue())) : 0;
            Map<?, ?> sticky = lane.get("sticky") == null ? Map.of() : map(lane.get("sticky"));
            List<Condition> conditions = new ArrayList<>();
            Object listed = lane.get("conditions");
            if (listed instanceof List) {
                for (Object c : (List<?>) listed) {
                    conditions.add(Condition.of(map(c)));
                }
            }
            return new EntryLane(name, w, text(sticky, "attachment"), text(sticky, "header"),
                    conditions.toArray(new Condition[0]));
        }

        boolean meets(Call call) {
            for (Condition c : conditions) {
                if (c.meets(call)) {
                    return true;
                }
            }
            return false;
        }

        /** Where the call falls, or -1 when the lane is sticky and the call has no key. */
        int roll(Call call, int random) {
            if (stickyAttachment == null && stickyHeader == null) {
                return random;
            }
            String value = stickyAttachment != null ? call.attachment(stickyAttachment) : null;
            if (value == null && stickyHeader != null) {
                value = call.header(stickyHeader);
            }
            return value == null ? -1 : stickyRoll(value);
        }
    }

    private static final class Condition {
        final String attachment;
        final int argument;
        final String header;
        final ValueMatch[] values;

        private Condition(String attachment, int argument, String header, ValueMatch[] values) {
            this.attachment = attachment;
            this.argument = argument;
            this.header = header;
            this.values = values;
        }

        static Condition of(Map<?, ?> c) {
            Object argument = c.get("argument");
            String values = text(c, "values");
            if (values == null) {
                throw new IllegalArgumentException("a condition without values");
            }
            String[] items = values.split(",");
            ValueMatch[] matches = new ValueMatch[items.length];
            for (int i = 0; i < items.length; i++) {
                matches[i] = ValueMatch.of(items[i]);
            }
            int index = argument instanceof Number ? ((Number) argument).intValue() : -1;
            return new Condition(text(c, "attachment"), index, text(c, "header"), matches);
        }

        boolean meets(Call call) {
            String value;
            if (attachment != null) {
                value = call.attachment(attachment);
            } else if (argument >= 0) {
                value = call.argument(argument);
            } else if (header != null) {
                value = call.header(header);
            } else {
                return false;
            }
            if (value == null) {
                return false;
            }
            for (ValueMatch m : values) {
                if (m.matches(value)) {
                    return true;
                }
            }
            return false;
        }
    }

    /** One item of Dubbo's condition syntax: an exact value, a {@code *} wildcard or a range. */
    static final class ValueMatch {
        private final String exact;
        private final String[] parts;
        private final long low;
        private final long high;

        private ValueMatch(String exact, String[] parts, long low, long high) {
            this.exact = exact;
            this.parts = parts;
            this.low = low;
            this.high = high;
        }

        static ValueMatch of(String item) {
            int tilde = item.indexOf('~', 1);
            if (tilde > 0) {
                try {
                    long low = Long.parseLong(item.substring(0, tilde));
                    long high = Long.parseLong(item.substring(tilde + 1));
                    return new ValueMatch(null, null, low, high);
                } catch (NumberFormatException e) {
                    throw new IllegalArgumentException("not a range: " + item);
                }
            }
            if (item.indexOf('*') >= 0) {
                return new ValueMatch(null, item.split("\\*", -1), 0, -1);
            }
            return new ValueMatch(item, null, 0, -1);
        }

        boolean matches(String value) {
            if (exact != null) {
                return exact.equals(value);
            }
            if (parts != null) {
                return glob(value);
            }
            try {
                long v = Long.parseLong(value.trim());
                return v >= low && v <= high;
            } catch (NumberFormatException e) {
                return false;
            }
        }

        private boolean glob(String value) {
            int last = parts.length - 1;
            if (!value.startsWith(parts[0])) {
                return false;
            }
            int at = parts[0].length();
            for (int i = 1; i < last; i++) {
                int found = value.indexOf(parts[i], at);
                if (found < 0) {
                    return false;
                }
                at = found + parts[i].length();
            }
            return value.length() - at >= parts[last].length() && value.endsWith(parts[last]);
        }
    }
}
