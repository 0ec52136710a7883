package io.laneway.lane.rocketmq;

import java.util.function.Predicate;
import java.util.function.Supplier;

import io.laneway.lane.MessageOwnership;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * What laneway's listeners share: the application's listener, the tier it handles messages for,
 * and the ownership document that says which messages are the tier's.
 */
abstract class TierListener<L> {
    final L listener;
    private final Supplier<MessageOwnership> ownership;
    private final String tier;

    TierListener(L listener, Supplier<MessageOwnership> ownership, String tier) {
        this.listener = listener;
        this.ownership = ownership;
        this.tier = tier;
    }

    /** The tier this listener handles messages for; {@code null} is baseline. */
    public String tier() {
        return tier;
    }

    /** Which of a batch's messages are the tier's, by the document in force when it arrived. */
    final Predicate<MessageExt> owned() {
        MessageOwnership owners = ownership.get();
        return message -> owners.owns(tier, LaneMessages.lane(message), message.getBornTimestamp());
    }
}
