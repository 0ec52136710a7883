package io.laneway.lane.kafka;

import java.util.AbstractList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

import io.laneway.lane.Lane;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * The records a poll hands the application, each handled in its lane: iterating them ({@link
 * #iterator()}, {@link #records(TopicPartition)}, {@link #records(String)}, {@code forEach}) makes
 * the lane of the record just taken the thread's current lane ({@link Lane#current()}), serving,
 * so that the calls the application makes while handling it (HTTP, Dubbo, Spring Cloud, more
 * records) stay in its lane. The thread gets its own lane back when the iteration ends, or at the
 * next poll when the application stopped before the end.
 */
final class LaneConsumerRecords<K, V> extends ConsumerRecords<K, V> {
    /** The thread's own lane and serving mark, while a record's lane stands in for them. */
    private record Saved(String lane, boolean serving) {}

    private static final ThreadLocal<Saved> SAVED = new ThreadLocal<>();

    LaneConsumerRecords(Map<TopicPartition, List<ConsumerRecord<K, V>>> records,
            Map<TopicPartition, OffsetAndMetadata> nextOffsets) {
        super(records, nextOffsets);
    }

    /** Gives the thread its own lane back, if a record's lane stands in for it. */
    static void leave() {
        Saved saved = SAVED.get();
        if (saved != null) {
            SAVED.remove();
            Lane.serving(saved.serving());
            Lane.restore(saved.lane());
        }
    }

    private static void enter(ConsumerRecord<?, ?> record) {
        String lane = LaneRecords.lane(record);
        if (SAVED.get() == null) {
            SAVED.set(new Saved(Lane.set(lane), Lane.serving(true)));
        } else {
            Lane.set(lane);
        }
    }

    private static <K, V> Iterator<ConsumerRecord<K, V>> inLane(Iterator<ConsumerRecord<K, V>> records) {
        return new Iterator<>() {
            @Override
            public boolean hasNext() {
                boolean more = records.hasNext();
                if (!more) {
                    leave();
                }
                return more;
            }

            @Override
            public ConsumerRecord<K, V> next() {
                ConsumerRecord<K, V> record = records.next();
                enter(record);
                return record;
            }
        };
    }

    @Override
    public Iterator<ConsumerRecord<K, V>> iterator() {
        return inLane(super.iterator());
    }

    @Override
    public Iterable<ConsumerRecord<K, V>> records(String topic) {
        Iterable<ConsumerRecord<K, V>> records = super.records(topic);
        return () -> inLane(records.iterator());
    }

    @Override
    public List<ConsumerRecord<K, V>> records(TopicPartition partition) {
        List<ConsumerRecord<K, V>> records = super.records(partition);
        return new AbstractList<>() {
            @Override
            public ConsumerRecord<K, V> get(int index) {
                return records.get(index);
            }

            @Override
            public int size() {
                return records.size();
            }

            @Override
            public Iterator<ConsumerRecord<K, V>> iterator() {
                return inLane(records.iterator());
            }
        };
    }
}
