package io.laneway.lane.kafka;

import java.util.Properties;

import io.laneway.lane.MessageOwnership;
import org.apache.kafka.clients.consumer.ConsumerConfig;

/** Consumer configuration for lanes: a group per tier, and the filtering interceptor. */
public final class LaneConsumers {
    private LaneConsumers() {}

    /** {@code group} for a baseline instance, {@code <group>_<lane>} for one in a lane ({@link MessageOwnership#group}). */
    public static String groupId(String group) {
        return MessageOwnership.group(group);
    }

    /**
     * {@code config} with its {@code group.id} made per tier ({@link #groupId}) and {@link
     * LaneConsumerInterceptor} added to its {@code interceptor.classes}.
     */
    public static Properties configure(Properties config) {
        Object group = config.get(ConsumerConfig.GROUP_ID_CONFIG);
        if (group != null) {
            config.put(ConsumerConfig.GROUP_ID_CONFIG, groupId(group.toString()));
        }
        String name = LaneConsumerInterceptor.class.getName();
        Object classes = config.get(ConsumerConfig.INTERCEPTOR_CLASSES_CONFIG);
        if (classes == null || classes.toString().isBlank()) {
            config.put(ConsumerConfig.INTERCEPTOR_CLASSES_CONFIG, name);
        } else if (!classes.toString().contains(name)) {
            config.put(ConsumerConfig.INTERCEPTOR_CLASSES_CONFIG, classes + "," + name);
        }
        return config;
    }
}
