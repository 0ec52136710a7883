package io.laneway.lane.rocketmq.spring;

import java.util.function.Supplier;
import java.util.logging.Level;
import java.util.logging.Logger;

import io.laneway.lane.MessageOwnership;
import io.laneway.lane.rocketmq.LaneMessageListener;
import io.laneway.lane.rocketmq.LaneMessages;
import io.laneway.lane.rocketmq.LaneOrderlyMessageListener;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.MessageListener;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.spring.core.RocketMQTemplate;
import org.apache.rocketmq.spring.support.DefaultRocketMQListenerContainer;
import org.springframework.beans.factory.config.BeanPostProcessor;

/**
 * Joins RocketMQ's Spring Boot starter as its beans are made, before they start:
 *
 * <ul>
 *   <li>a {@link RocketMQTemplate}'s producer stamps the current lane on every message ({@link
 *       LaneMessages#register});
 *   <li>a listener container's consumer joins its tier's group ({@code <group>_<tier>}, {@link
 *       MessageOwnership#group(String, String)}; a lane's group starts from the first offset, so
 *       that a consumer restarted into a new lane takes the messages that waited for it) and
 *       hands the listener only the messages its tier
 *       owns, each in its lane ({@link LaneMessageListener}, {@link LaneOrderlyMessageListener}
 *       for an orderly one).
 * </ul>
 *
 * <p>The tier is {@value #TIER} when set ({@code baseline} for baseline), else the instance's own
 * lane; the ownership document comes from the file {@value #FILE} or, with {@value #APPLICATION},
 * from the config centre of the application's Dubbo ({@link MessageOwnership#source}).
 */
public class LaneRocketMQPostProcessor implements BeanPostProcessor {
    /** The tier of this application's consumers, when it is not the instance's own lane. */
    public static final String TIER = "laneway.tier";
    /** A file holding the ownership document. */
    public static final String FILE = "laneway.messages.file";
    /** The application whose ownership document Dubbo's config centre holds. */
    public static final String APPLICATION = "laneway.messages.application";

    private static final Logger LOG = Logger.getLogger("io.laneway.lane.rocketmq");

    private final String tier;
    private final String file;
    private final String application;
    private Supplier<MessageOwnership> ownership;

    public LaneRocketMQPostProcessor(String tier, String file, String application) {
        this.tier = MessageOwnership.tier(tier);
        this.file = file;
        this.application = application;
    }

    @Override
    public Object postProcessAfterInitialization(Object bean, String name) {
        if (bean instanceof RocketMQTemplate template && template.getProducer() != null) {
            LaneMessages.register(template.getProducer());
        } else if (bean instanceof DefaultRocketMQListenerContainer container && container.getConsumer() != null) {
            join(container.getConsumer(), name);
        }
        return bean;
    }

    private void join(DefaultMQPushConsumer consumer, String name) {
        MessageListener listener = consumer.getMessageListener();
        if (listener instanceof LaneMessageListener || listener instanceof LaneOrderlyMessageListener) {
            return;
        }
        if (listener instanceof MessageListenerConcurrently concurrently) {
            consumer.registerMessageListener(new LaneMessageListener(concurrently, ownership(), tier));
        } else if (listener instanceof MessageListenerOrderly orderly) {
            consumer.registerMessageListener(new LaneOrderlyMessageListener(orderly, ownership(), tier));
        } else {
            LOG.log(Level.WARNING, "laneway: " + name + " has a listener laneway does not know; its messages are"
                    + " handled in group " + consumer.getConsumerGroup() + " whatever their lane");
            return;
        }
        consumer.setConsumerGroup(MessageOwnership.group(consumer.getConsumerGroup(), tier));
        if (tier != null) {
            // a lane's group is new when its first consumer starts: it begins with what is there
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        }
    }

    private synchronized Supplier<MessageOwnership> ownership() {
        if (ownership == null) {
            ownership = MessageOwnership.source(file, application);
        }
        return ownership;
    }
}
