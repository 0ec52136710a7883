package io.laneway.lane.rocketmq;

import java.util.Collections;
import java.util.List;
import java.util.function.Predicate;
import java.util.function.Supplier;

import io.laneway.lane.MessageOwnership;
import io.laneway.lane.OwnLane;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * {@link LaneMessageListener} for orderly consumption: hands the application's listener only the
 * messages this consumer's tier owns, in their order, one at a time, each in its lane. When the
 * listener asks to suspend the queue, the batch comes back whole, as it would to the listener
 * alone.
 */
public class LaneOrderlyMessageListener extends TierListener<MessageListenerOrderly> implements MessageListenerOrderly {
    public LaneOrderlyMessageListener(MessageListenerOrderly listener, Supplier<MessageOwnership> ownership) {
        this(listener, ownership, OwnLane.get());
    }

    /** {@code tier} {@code null} is baseline. */
    public LaneOrderlyMessageListener(MessageListenerOrderly listener, Supplier<MessageOwnership> ownership, String tier) {
        super(listener, ownership, tier);
    }

    @Override
    public ConsumeOrderlyStatus consumeMessage(List<MessageExt> messages, ConsumeOrderlyContext context) {
        Predicate<MessageExt> owned = owned();
        for (MessageExt message : messages) {
            if (!owned.test(message)) {
                continue;
            }
            ConsumeOrderlyStatus status = LaneMessages.handle(message,
                    () -> listener.consumeMessage(Collections.singletonList(message), context));
            if (status == ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT) {
                return status;
            }
        }
        return ConsumeOrderlyStatus.SUCCESS;
    }
}
