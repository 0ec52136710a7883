package io.laneway.harness;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import io.laneway.demo.Hop;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.spring.annotation.RocketMQMessageListener;
import org.apache.rocketmq.spring.core.RocketMQListener;
import org.apache.rocketmq.spring.core.RocketMQPushConsumerLifecycleListener;
import org.apache.rocketmq.spring.core.RocketMQTemplate;
import org.apache.rocketmq.spring.support.DefaultRocketMQListenerContainer;
import org.springframework.boot.Banner;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;

/**
 * RocketMQ pods as applications on RocketMQ's Spring Boot starter, with laneway-rocketmq on the
 * class path and no laneway code: a producer sending through {@link RocketMQTemplate}, and a
 * {@code @RocketMQMessageListener} that handles each message it is given by calling --next's
 * {@link Hop} chain over Dubbo. laneway's part is the dependency and the
 * {@code laneway.messages.application} property.
 *
 * <pre>
 * rproducer --namesrv HOST:PORT --topic T [--labels FILE]          (commands: {@link MessageLoop})
 * rconsumer --id ID --namesrv HOST:PORT --topic T --group G --zk HOST:PORT --app APP --next APP [--labels FILE]
 *     listens in group G, then starts Dubbo, whose config centre (ZooKeeper) holds APP's
 *     ownership document, and prints a line for each message handled ({@link MessageLoop})
 * </pre>
 */
final class RocketRoles {
    /** The listener's Dubbo hop, once Dubbo is up, and its id. */
    private static final CompletableFuture<Hop> NEXT = new CompletableFuture<>();
    private static String id;

    static void producer(Args args) throws Exception {
        try (ConfigurableApplicationContext context = start(Map.of(
                "rocketmq.name-server", args.require("namesrv"),
                "rocketmq.producer.group", "laneway-producer-" + ProcessHandle.current().pid()))) {
            RocketMQTemplate template = context.getBean(RocketMQTemplate.class);
            String topic = args.require("topic");
            MessageLoop.produce("rproducer", value -> template.syncSend(topic, value), () -> {});
        }
    }

    static void consumer(Args args) throws Exception {
        id = args.require("id");
        // as with Dubbo's Spring Boot starter, the listener starts before Dubbo does
        ConfigurableApplicationContext context = start(Map.of(
                "rocketmq.name-server", args.require("namesrv"),
                "harness.topic", args.require("topic"),
                "harness.group", args.require("group"),
                "laneway.messages.application", args.require("app")));
        DefaultMQPushConsumer consumer = context.getBean(DefaultRocketMQListenerContainer.class).getConsumer();
        NEXT.complete(MessageLoop.dubbo(args));
        while (consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().isEmpty()) {
            Thread.sleep(100);
        }
        Main.OUT.println("READY rconsumer id=" + id + " group=" + consumer.getConsumerGroup()
                + " ms=" + (System.currentTimeMillis() - Main.JVM_START));
        Thread.currentThread().join();
    }

    private static ConfigurableApplicationContext start(Map<String, Object> properties) {
        return new SpringApplicationBuilder(Application.class).web(WebApplicationType.NONE)
                .bannerMode(Banner.Mode.OFF).logStartupInfo(false).properties(properties).run();
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    static class Application {
        @Bean
        @ConditionalOnProperty("harness.topic")
        Orders orders() {
            return new Orders();
        }
    }

    /** The application's listener: reads every message from the beginning, as a new group. */
    @RocketMQMessageListener(topic = "${harness.topic}", consumerGroup = "${harness.group}")
    static class Orders implements RocketMQListener<MessageExt>, RocketMQPushConsumerLifecycleListener {
        @Override
        public void onMessage(MessageExt message) {
            MessageLoop.handled(id, NEXT.join(), new String(message.getBody(), StandardCharsets.UTF_8),
                    message.getUserProperty("x-lane"), message.getBornTimestamp());
        }

        @Override
        public void prepareStart(DefaultMQPushConsumer consumer) {
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        }
    }

    private RocketRoles() {}
}
