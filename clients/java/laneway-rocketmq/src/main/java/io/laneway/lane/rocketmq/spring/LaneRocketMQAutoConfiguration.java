package io.laneway.lane.rocketmq.spring;

import org.apache.rocketmq.spring.support.DefaultRocketMQListenerContainer;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.context.annotation.Bean;
import org.springframework.core.env.Environment;

/**
 * Lanes for applications on RocketMQ's Spring Boot starter, with nothing but the dependency and
 * configuration: every {@code RocketMQTemplate} stamps the current lane on the messages it sends,
 * and every concurrently consuming {@code @RocketMQMessageListener} joins its tier's group and
 * handles only the messages its tier owns, each in its lane ({@link LaneRocketMQPostProcessor}).
 */
@AutoConfiguration
@ConditionalOnClass(DefaultRocketMQListenerContainer.class)
public class LaneRocketMQAutoConfiguration {
    @Bean
    static LaneRocketMQPostProcessor lanewayRocketMQPostProcessor(Environment environment) {
        return new LaneRocketMQPostProcessor(environment.getProperty(LaneRocketMQPostProcessor.TIER),
                environment.getProperty(LaneRocketMQPostProcessor.FILE),
                environment.getProperty(LaneRocketMQPostProcessor.APPLICATION));
    }
}
