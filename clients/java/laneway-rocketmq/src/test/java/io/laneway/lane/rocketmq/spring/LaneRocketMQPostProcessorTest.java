package io.laneway.lane.rocketmq.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import io.laneway.lane.Lane;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.spring.core.RocketMQTemplate;
import org.apache.rocketmq.spring.support.DefaultRocketMQListenerContainer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class LaneRocketMQPostProcessorTest {
    // dev-alice's consumers own dev-alice from 1005000
    private static final String DOCUMENT = "{\"key\": \"order-service\", \"epochs\": ["
            + "{\"from\": 0, \"owners\": {}}, {\"from\": 1005000, \"owners\": {\"dev-alice\": [\"dev-alice\"]}}]}";

    @TempDir
    Path dir;

    private static MessageExt message(String id, String lane) {
        MessageExt message = new MessageExt();
        message.setBody(id.getBytes());
        message.setBornTimestamp(1_005_500);
        if (lane != null) {
            message.putUserProperty("x-lane", lane);
        }
        return message;
    }

    private static DefaultRocketMQListenerContainer container(DefaultMQPushConsumer consumer) {
        DefaultRocketMQListenerContainer container = new DefaultRocketMQListenerContainer();
        container.setConsumer(consumer);
        return container;
    }

    /** A consumer in group {@code orders} whose listener notes each message it is given, and its lane. */
    private static DefaultMQPushConsumer concurrently(List<String> seen) {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("orders");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            messages.forEach(m -> seen.add(new String(m.getBody()) + "@" + Lane.current()));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        return consumer;
    }

    /** Messages 0 (no lane), 1 (dev-alice) and 2 (gray), born when dev-alice owns its lane. */
    private static List<MessageExt> batch() {
        return List.of(message("0", null), message("1", "dev-alice"), message("2", "gray"));
    }

    @Test
    void aStartersListenerJoinsItsTiersGroupAndHandlesOnlyItsTiersMessagesInTheirLane() throws Exception {
        Path file = Files.writeString(dir.resolve("order-service.laneway-messages"), DOCUMENT);
        List<String> seen = new ArrayList<>();
        DefaultMQPushConsumer consumer = concurrently(seen);
        LaneRocketMQPostProcessor laneway = new LaneRocketMQPostProcessor("dev-alice", file.toString(), null);
        DefaultRocketMQListenerContainer container = container(consumer);
        assertSame(container, laneway.postProcessAfterInitialization(container, "orders"));

        assertEquals("orders_dev-alice", consumer.getConsumerGroup());
        assertEquals(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, consumer.getConsumeFromWhere());
        ConsumeConcurrentlyContext context = new ConsumeConcurrentlyContext(new MessageQueue("orders", "broker-a", 0));
        ((MessageListenerConcurrently) consumer.getMessageListener()).consumeMessage(batch(), context);
        assertEquals(List.of("1@dev-alice"), seen);

        laneway.postProcessAfterInitialization(container, "orders");
        assertEquals("orders_dev-alice", consumer.getConsumerGroup(), "joined once");

        seen.clear();
        DefaultMQPushConsumer baseline = concurrently(seen);
        new LaneRocketMQPostProcessor("baseline", file.toString(), null).postProcessAfterInitialization(container(baseline), "orders");
        ((MessageListenerConcurrently) baseline.getMessageListener()).consumeMessage(batch(), context);
        assertEquals("orders", baseline.getConsumerGroup());
        assertEquals(List.of("0@null", "2@gray"), seen);
    }

    @Test
    void anOrderlyListenerJoinsItsTierToo() throws Exception {
        Path file = Files.writeString(dir.resolve("order-service.laneway-messages"), DOCUMENT);
        List<String> seen = new ArrayList<>();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("orders");
        consumer.registerMessageListener((MessageListenerOrderly) (messages, context) -> {
            messages.forEach(m -> seen.add(new String(m.getBody()) + "@" + Lane.current()));
            return ConsumeOrderlyStatus.SUCCESS;
        });
        new LaneRocketMQPostProcessor("dev-alice", file.toString(), null).postProcessAfterInitialization(container(consumer), "orders");
        assertEquals("orders_dev-alice", consumer.getConsumerGroup());
        ((MessageListenerOrderly) consumer.getMessageListener()).consumeMessage(batch(),
                new ConsumeOrderlyContext(new MessageQueue("orders", "broker-a", 0)));
        assertEquals(List.of("1@dev-alice"), seen);
    }

    @Test
    void aTemplatesProducerStampsTheLane() {
        RocketMQTemplate template = new RocketMQTemplate();
        DefaultMQProducer producer = new DefaultMQProducer("producer");
        template.setProducer(producer);
        assertFalse(producer.getDefaultMQProducerImpl().hasSendMessageHook());
        new LaneRocketMQPostProcessor(null, null, null).postProcessAfterInitialization(template, "rocketMQTemplate");
        assertTrue(producer.getDefaultMQProducerImpl().hasSendMessageHook());
    }
}
