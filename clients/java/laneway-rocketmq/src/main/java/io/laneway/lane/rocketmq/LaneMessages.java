package io.laneway.lane.rocketmq;

import io.laneway.lane.Baggage;
import io.laneway.lane.Lane;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;

/**
 * The lane a RocketMQ message carries, and handling a message in it: user property {@value
 * #PROPERTY}, else the {@code lane} member of a W3C {@value #BAGGAGE} property; an invalid value is
 * no lane.
 *
 * <pre>{@code
 * LaneMessages.register(producer);                       // every message sent carries the lane
 * consumer.registerMessageListener(new LaneMessageListener(listener, ownership));
 * }</pre>
 */
public final class LaneMessages {
    /** The user property holding the lane. */
    public static final String PROPERTY = "x-lane";
    /** The W3C baggage property, whose {@code lane} member holds the lane too. */
    public static final String BAGGAGE = "baggage";

    private LaneMessages() {}

    /** Makes {@code producer} stamp the current lane on every message it sends ({@link LaneSendHook}). */
    public static DefaultMQProducer register(DefaultMQProducer producer) {
        producer.getDefaultMQProducerImpl().registerSendMessageHook(new LaneSendHook());
        return producer;
    }

    /** The lane {@code message} carries, or {@code null}. */
    public static String lane(Message message) {
        String lane = Lane.validOrNull(message.getUserProperty(PROPERTY));
        if (lane != null) {
            return lane;
        }
        String baggage = message.getUserProperty(BAGGAGE);
        return baggage == null ? null : Baggage.lane(baggage);
    }

    /**
     * Runs {@code handler} as serving {@code message}: in the message's lane ({@link Lane#current()}),
     * so that the calls it makes (HTTP, Dubbo, Spring Cloud, more messages) stay in the lane.
     */
    public static <T> T handle(Message message, java.util.function.Supplier<T> handler) {
        String previous = Lane.set(lane(message));
        boolean wasServing = Lane.serving(true);
        try {
            return handler.get();
        } finally {
            Lane.serving(wasServing);
            Lane.restore(previous);
        }
    }

    /** Puts {@code lane} on {@code message} as {@value #PROPERTY} and as W3C baggage, unless it has a lane. */
    static void stamp(Message message, String lane) {
        if (lane == null || message.getUserProperty(PROPERTY) != null) {
            return;
        }
        message.putUserProperty(PROPERTY, lane);
        if (message.getUserProperty(BAGGAGE) == null) {
            message.putUserProperty(BAGGAGE, "lane=" + lane);
        }
    }
}
