package io.laneway.lane.rocketmq;

import java.util.Collections;
import java.util.List;
import java.util.function.Predicate;
import java.util.function.Supplier;

import io.laneway.lane.MessageOwnership;
import io.laneway.lane.OwnLane;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Hands the application's listener only the messages this consumer's tier owns, by the message
 * ownership document laneway publishes for the application ({@link MessageOwnership}): each
 * message is decided by its lane ({@link LaneMessages#lane}) and its born timestamp, and handled
 * one at a time in its lane ({@link LaneMessages#handle}); when the listener asks for one to be
 * consumed later, it and the rest of the batch come back, the ones before it do not. The messages
 * left out are acknowledged:
 * another tier's group handles them, so each tier needs a consumer group of its own ({@link
 * MessageOwnership#group}).
 *
 * <p>The tier is this instance's own lane when the listener is made ({@link OwnLane}), unless
 * given. The ownership comes from a {@link io.laneway.lane.MessageOwnershipFile} or, with Dubbo,
 * {@code io.laneway.lane.dubbo.DubboMessageOwnership}.
 */
public class LaneMessageListener extends TierListener<MessageListenerConcurrently> implements MessageListenerConcurrently {
    public LaneMessageListener(MessageListenerConcurrently listener, Supplier<MessageOwnership> ownership) {
        this(listener, ownership, OwnLane.get());
    }

    /** {@code tier} {@code null} is baseline. */
    public LaneMessageListener(MessageListenerConcurrently listener, Supplier<MessageOwnership> ownership, String tier) {
        super(listener, ownership, tier);
    }

    @Override
    public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> messages, ConsumeConcurrentlyContext context) {
        Predicate<MessageExt> owned = owned();
        for (int i = 0; i < messages.size(); i++) {
            MessageExt message = messages.get(i);
            if (!owned.test(message)) {
                continue;
            }
            ConsumeConcurrentlyStatus status = LaneMessages.handle(message,
                    () -> listener.consumeMessage(Collections.singletonList(message), context));
            if (status != ConsumeConcurrentlyStatus.CONSUME_SUCCESS) {
                // the messages before this one are done: only this one and the rest come back
                context.setAckIndex(i - 1);
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
        }
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
    }
}
