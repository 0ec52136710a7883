package io.laneway.lane.rocketmq;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.ArrayList;
import java.util.List;

import io.laneway.lane.Lane;
import io.laneway.lane.MessageOwnership;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.hook.SendMessageContext;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class LaneRocketMQTest {
    // dev-alice's consumers own dev-alice and dev-carol from 1005000; relabelled out from 1006000
    private static final MessageOwnership OWNERSHIP = MessageOwnership.parse("{\"key\": \"order-service\", \"epochs\": ["
            + "{\"from\": 0, \"owners\": {}},"
            + "{\"from\": 1005000, \"owners\": {\"dev-alice\": [\"dev-alice\", \"dev-carol\"]}},"
            + "{\"from\": 1006000, \"owners\": {}}]}");

    @AfterEach
    void clear() {
        Lane.set(null);
    }

    private static Message sent(Message message) {
        SendMessageContext context = new SendMessageContext();
        context.setMessage(message);
        new LaneSendHook().sendMessageBefore(context);
        return message;
    }

    @Test
    void messagesSentInALaneCarryItAsAPropertyAndAsBaggage() {
        Lane.set("dev-alice");
        Message message = sent(new Message("orders", "v".getBytes()));
        assertEquals("dev-alice", message.getUserProperty("x-lane"));
        assertEquals("lane=dev-alice", message.getUserProperty("baggage"));

        Message own = new Message("orders", "v".getBytes());
        own.putUserProperty("x-lane", "gray");
        assertEquals("gray", LaneMessages.lane(sent(own)), "the application's own lane wins");
        assertNull(own.getUserProperty("baggage"));

        Lane.set(null);
        assertNull(LaneMessages.lane(sent(new Message("orders", "v".getBytes()))), "no lane, no property");
    }

    private static MessageExt message(String id, String lane, long born, boolean baggage) {
        MessageExt message = new MessageExt();
        message.setTopic("orders");
        message.setBody(id.getBytes());
        message.setBornTimestamp(born);
        if (lane != null) {
            message.putUserProperty(baggage ? "baggage" : "x-lane", (baggage ? "user=7,lane=" : "") + lane);
        }
        return message;
    }

    /** The bodies the application's listener was handed by a listener of {@code tier}, and the lane each ran in. */
    private static List<String> handled(String tier, List<MessageExt> batch) {
        List<String> seen = new ArrayList<>();
        LaneMessageListener listener = new LaneMessageListener((messages, context) -> {
            seen.add(new String(messages.get(0).getBody()) + "@" + Lane.current());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        }, () -> OWNERSHIP, tier);
        ConsumeConcurrentlyContext context = new ConsumeConcurrentlyContext(new MessageQueue("orders", "broker-a", 0));
        assertEquals(ConsumeConcurrentlyStatus.CONSUME_SUCCESS, listener.consumeMessage(batch, context));
        return seen;
    }

    @Test
    void everyMessageGoesToExactlyOneTierByItsLaneAndBornTime() {
        List<MessageExt> batch = List.of(
                message("0", null, 1_005_500, false),        // untagged: baseline
                message("1", "dev-alice", 1_004_999, false), // before the switch: baseline
                message("2", "dev-alice", 1_005_000, false), // dev-alice
                message("3", "dev-carol", 1_005_999, true),  // falls back to dev-alice, lane in baggage
                message("4", "dev-alice", 1_006_000, false), // relabelled out: baseline
                message("5", "gray", 1_005_500, false));     // no tier lists it: baseline
        assertEquals(List.of("0@null", "1@dev-alice", "4@dev-alice", "5@gray"), handled(null, batch));
        assertEquals(List.of("2@dev-alice", "3@dev-carol"), handled("dev-alice", batch));
        assertEquals(List.of(), handled("dev-carol", batch), "a tier without consumers of its own takes nothing");
    }

    @Test
    void aMessageToConsumeLaterComesBackWithTheRestAndNotTheOnesBefore() {
        List<MessageExt> batch = List.of(message("a", null, 1, false), message("b", null, 2, false),
                message("c", null, 3, false));
        LaneMessageListener listener = new LaneMessageListener((messages, context) ->
                new String(messages.get(0).getBody()).equals("b")
                        ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS,
                () -> MessageOwnership.BASELINE, null);
        ConsumeConcurrentlyContext context = new ConsumeConcurrentlyContext(new MessageQueue("orders", "broker-a", 0));
        assertEquals(ConsumeConcurrentlyStatus.CONSUME_SUCCESS, listener.consumeMessage(batch, context));
        assertEquals(0, context.getAckIndex(), "a is done; b and c come back");
    }

    @Test
    void anOrderlyListenerGetsItsTiersMessagesInOrderAndASuspendedBatchComesBackWhole() {
        List<MessageExt> batch = List.of(message("0", "dev-alice", 1_005_100, false), message("1", null, 1_005_200, false),
                message("2", "dev-alice", 1_005_300, false), message("3", "dev-alice", 1_005_400, false));
        List<String> seen = new ArrayList<>();
        LaneOrderlyMessageListener listener = new LaneOrderlyMessageListener((messages, context) -> {
            String body = new String(messages.get(0).getBody());
            seen.add(body + "@" + Lane.current());
            return body.equals("2") ? ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT : ConsumeOrderlyStatus.SUCCESS;
        }, () -> OWNERSHIP, "dev-alice");
        ConsumeOrderlyContext context = new ConsumeOrderlyContext(new MessageQueue("orders", "broker-a", 0));
        assertEquals(ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT, listener.consumeMessage(batch, context));
        assertEquals(List.of("0@dev-alice", "2@dev-alice"), seen, "baseline's 1 left out, 3 not reached");
        assertNull(Lane.current());
    }
}
