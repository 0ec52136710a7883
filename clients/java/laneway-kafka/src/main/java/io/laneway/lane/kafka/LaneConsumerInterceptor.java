package io.laneway.lane.kafka;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;
import java.util.logging.Level;
import java.util.logging.Logger;

import io.laneway.lane.MessageOwnership;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * Hands the application only the records this consumer's tier owns, by the message ownership
 * document laneway publishes for the application ({@link MessageOwnership}): each record is
 * decided by its lane ({@link LaneRecords#lane}) and its timestamp, and handled in its lane: while
 * the application iterates the records of a poll, the current lane ({@link
 * io.laneway.lane.Lane#current()}) is the lane of the record in hand, so its onward calls keep it.
 * The records left out are still consumed (their offsets are committed): another tier's group
 * handles them.
 *
 * <p>The tier is {@value #TIER} when set ({@code baseline} or empty for baseline), else this
 * instance's own lane when the consumer starts ({@link io.laneway.lane.OwnLane}). Each tier needs
 * a consumer group of its own ({@link LaneConsumers#groupId}), since every tier reads every
 * record. The document is read from the file {@value #FILE} (checked for changes at most once a
 * second; a missing file is no document), or, with {@value #APPLICATION}, from the config centre
 * the application's Dubbo already uses (key {@code <application>.laneway-messages}, group
 * {@code dubbo}, kept live; needs laneway-dubbo). Without a document baseline owns every record.
 * A document that cannot be read is logged once and the last good one stays in force.
 */
public class LaneConsumerInterceptor implements ConsumerInterceptor<Object, Object> {
    /** The tier of this consumer, when it is not the instance's own lane. */
    public static final String TIER = "laneway.tier";
    /** A file holding the ownership document. */
    public static final String FILE = "laneway.messages.file";
    /** The application whose ownership document Dubbo's config centre holds. */
    public static final String APPLICATION = "laneway.messages.application";

    static final Logger LOG = Logger.getLogger("io.laneway.lane.kafka");

    private String tier;
    private Supplier<MessageOwnership> ownership = () -> MessageOwnership.BASELINE;

    @Override
    public void configure(Map<String, ?> configs) {
        this.tier = MessageOwnership.tier(text(configs.get(TIER)));
        String group = text(configs.get(ConsumerConfig.GROUP_ID_CONFIG));
        if (group != null && tier != null && !group.endsWith("_" + tier)) {
            LOG.log(Level.WARNING, "laneway: consumer group " + group + " serves tier " + tier
                    + ": give each tier a group of its own (LaneConsumers.groupId)");
        }
        if (tier != null && !"earliest".equals(text(configs.get(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG)))) {
            LOG.log(Level.WARNING, "laneway: the group of tier " + tier + " should begin with the records already"
                    + " there (auto.offset.reset=earliest): they wait for the lane's first consumer");
        }
        ownership = MessageOwnership.source(text(configs.get(FILE)), text(configs.get(APPLICATION)));
    }

    private static String text(Object value) {
        return value == null ? null : value.toString();
    }

    /** The tier this consumer handles records for; {@code null} is baseline. */
    public String tier() {
        return tier;
    }

    /**
     * The records of {@code records} this consumer's tier owns, each handled in its lane as the
     * application iterates them ({@link LaneConsumerRecords}); the offsets to commit are those of
     * the whole poll.
     */
    @Override
    public ConsumerRecords<Object, Object> onConsume(ConsumerRecords<Object, Object> records) {
        LaneConsumerRecords.leave();
        if (records.isEmpty()) {
            return records;
        }
        MessageOwnership owners = ownership.get();
        Map<TopicPartition, List<ConsumerRecord<Object, Object>>> kept = new HashMap<>();
        for (TopicPartition partition : records.partitions()) {
            List<ConsumerRecord<Object, Object>> mine = new ArrayList<>();
            for (ConsumerRecord<Object, Object> record : records.records(partition)) {
                if (owners.owns(tier, LaneRecords.lane(record), record.timestamp())) {
                    mine.add(record);
                }
            }
            if (!mine.isEmpty()) {
                kept.put(partition, mine);
            }
        }
        return new LaneConsumerRecords<>(kept, records.nextOffsets());
    }

    @Override
    public void onCommit(Map<TopicPartition, OffsetAndMetadata> offsets) {}

    @Override
    public void close() {
        if (ownership instanceof AutoCloseable) {
            try {
                ((AutoCloseable) ownership).close();
            } catch (Exception e) {
                LOG.log(Level.FINE, "laneway: closing the ownership source", e);
            }
        }
    }
}
