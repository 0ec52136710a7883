package io.laneway.lane.rocketmq;

import io.laneway.lane.Lane;
import org.apache.rocketmq.client.hook.SendMessageContext;
import org.apache.rocketmq.client.hook.SendMessageHook;

/**
 * Stamps every message sent with the current lane ({@link Lane#effective()}: the lane of the
 * request being served, else this instance's own lane), as user property {@value
 * LaneMessages#PROPERTY} and as W3C baggage ({@code lane=...}). A message that already carries
 * {@value LaneMessages#PROPERTY} keeps it; one sent in no lane gets neither.
 */
public class LaneSendHook implements SendMessageHook {
    @Override
    public String hookName() {
        return "laneway-lane";
    }

    @Override
    public void sendMessageBefore(SendMessageContext context) {
        LaneMessages.stamp(context.getMessage(), Lane.effective());
    }

    @Override
    public void sendMessageAfter(SendMessageContext context) {}
}
