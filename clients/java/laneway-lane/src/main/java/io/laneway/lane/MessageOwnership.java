package io.laneway.lane;

import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;
import java.util.logging.Level;

/**
 * Which tier's consumers handle each message, as laneway publishes it per consumer application
 * (key {@code <application>.laneway-messages}): a history of epochs, each the owners in effect for
 * messages born at or after its {@code from} (milliseconds since the Unix epoch).
 *
 * <p>A message is decided by the last epoch whose {@code from} is not after its born time (the
 * first epoch decides anything older). In it, the consumers of tier {@code T} (a lane) handle a
 * message of lane {@code L} when {@code T}'s list names {@code L}; baseline consumers handle a
 * message in no lane and one whose lane no tier lists. Every tier decides every message against
 * the same history, so exactly one tier handles each one.
 */
public final class MessageOwnership {
    /** Baseline owns every message: what consumers do before laneway publishes a document. */
    public static final MessageOwnership BASELINE = new MessageOwnership(
            new long[] {0}, List.of(Collections.<String, String>emptyMap()));

    // from[i] is where epoch i begins; tiers.get(i) maps each listed lane to the tier owning it
    private final long[] from;
    private final List<Map<String, String>> tiers;

    private MessageOwnership(long[] from, List<Map<String, String>> tiers) {
        this.from = from;
        this.tiers = tiers;
    }

    /**
     * The ownership in a document as laneway writes it (JSON). Throws {@link
     * IllegalArgumentException} for a document of another shape.
     */
    public static MessageOwnership parse(String json) {
        return of(Json.parse(json));
    }

    /**
     * The ownership in a parsed document: a map with an {@code epochs} list, as a YAML or JSON
     * parser returns it. Throws {@link IllegalArgumentException} for a document of another shape.
     */
    public static MessageOwnership of(Object document) {
        Object epochs = EntryRules.map(document).get("epochs");
        if (!(epochs instanceof List) || ((List<?>) epochs).isEmpty()) {
            throw new IllegalArgumentException("epochs is not a non-empty list");
        }
        List<?> list = (List<?>) epochs;
        long[] from = new long[list.size()];
        List<Map<String, String>> tiers = new ArrayList<>(list.size());
        for (int i = 0; i < list.size(); i++) {
            Map<?, ?> epoch = EntryRules.map(list.get(i));
            if (!(epoch.get("from") instanceof Number)) {
                throw new IllegalArgumentException("an epoch without a from time");
            }
            from[i] = ((Number) epoch.get("from")).longValue();
            if (i > 0 && from[i] <= from[i - 1]) {
                throw new IllegalArgumentException("epochs out of order");
            }
            tiers.add(owners(epoch.get("owners")));
        }
        return new MessageOwnership(from, tiers);
    }

    private static Map<String, String> owners(Object owners) {
        Map<String, String> tierOf = new HashMap<>();
        for (Map.Entry<?, ?> e : EntryRules.map(owners == null ? Map.of() : owners).entrySet()) {
            String tier = String.valueOf(e.getKey());
            if (!Lane.isValid(tier) || !(e.getValue() instanceof List)) {
                throw new IllegalArgumentException("a tier without a valid name or lane list");
            }
            for (Object lane : (List<?>) e.getValue()) {
                tierOf.put(String.valueOf(lane), tier);
            }
        }
        return tierOf;
    }

    /**
     * The tier that owns a message of {@code lane} ({@code null}: none) born at {@code born}
     * (milliseconds since the Unix epoch); {@code null} means baseline.
     */
    public String owner(String lane, long born) {
        int i = from.length - 1;
        while (i > 0 && from[i] > born) {
            i--;
        }
        return lane == null ? null : tiers.get(i).get(lane);
    }

    /** Whether the consumers of {@code tier} ({@code null}: baseline) handle the message. */
    public boolean owns(String tier, String lane, long born) {
        String owner = owner(lane, born);
        return tier == null ? owner == null : tier.equals(owner);
    }

    /**
     * The consumer group of this instance's tier: {@code group} on a baseline instance,
     * {@code <group>_<lane>} on one in a lane ({@link OwnLane}). Every tier reads every message,
     * so each needs a group of its own.
     */
    public static String group(String group) {
        return group(group, OwnLane.get());
    }

    /** The consumer group of tier {@code tier}: {@code group} for baseline ({@code null}), else {@code <group>_<tier>}. */
    public static String group(String group, String tier) {
        return tier == null ? group : group + "_" + tier;
    }

    /**
     * The tier a consumer configured with {@code tier} serves: {@code null} (baseline) for
     * {@code baseline} or an empty value, the lane for a valid lane, and this instance's own lane
     * ({@link OwnLane}) when not configured.
     */
    public static String tier(String tier) {
        if (tier == null) {
            return OwnLane.get();
        }
        return tier.isEmpty() || tier.equals("baseline") ? null : Lane.validOrNull(tier);
    }

    /**
     * Where a consumer reads the ownership document: the file {@code file} when given ({@link
     * MessageOwnershipFile}), else the config centre of the application's Dubbo for {@code
     * application} ({@code io.laneway.lane.dubbo.DubboMessageOwnership}, in laneway-dubbo), else
     * nowhere: baseline owns every message.
     */
    @SuppressWarnings("unchecked")
    public static Supplier<MessageOwnership> source(String file, String application) {
        if (file != null) {
            return new MessageOwnershipFile(Paths.get(file));
        }
        if (application != null) {
            try {
                return (Supplier<MessageOwnership>) Class.forName("io.laneway.lane.dubbo.DubboMessageOwnership")
                        .getMethod("of", String.class).invoke(null, application);
            } catch (ReflectiveOperationException | LinkageError e) {
                Lane.LOG.log(Level.WARNING, "laneway: the message ownership of " + application
                        + " is read through Dubbo's config centre, which needs laneway-dubbo and Dubbo;"
                        + " baseline handles every message", e);
            }
        }
        return () -> BASELINE;
    }
}
