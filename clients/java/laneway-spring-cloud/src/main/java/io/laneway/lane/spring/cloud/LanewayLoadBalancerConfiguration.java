package io.laneway.lane.spring.cloud;

import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.cloud.client.ConditionalOnBlockingDiscoveryEnabled;
import org.springframework.cloud.client.ConditionalOnDiscoveryEnabled;
import org.springframework.cloud.client.ConditionalOnReactiveDiscoveryEnabled;
import org.springframework.cloud.client.discovery.DiscoveryClient;
import org.springframework.cloud.client.discovery.ReactiveDiscoveryClient;
import org.springframework.cloud.loadbalancer.core.ServiceInstanceListSupplier;
import org.springframework.cloud.loadbalancer.support.LoadBalancerEnvironmentPropertyUtils;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Condition;
import org.springframework.context.annotation.ConditionContext;
import org.springframework.context.annotation.Conditional;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.annotation.Order;
import org.springframework.core.type.AnnotatedTypeMetadata;

/**
 * The configuration of each load-balancer client context (one per service called) when
 * {@code spring.cloud.loadbalancer.configurations} (or the client's own
 * {@code spring.cloud.loadbalancer.clients.<service>.configurations}) is {@code laneway}: the
 * instances of the discovery client, cached as Spring Cloud's default configuration caches them,
 * then chosen by lane ({@link LaneServiceInstanceListSupplier}). Given to Spring Cloud as the
 * default configuration of every client by {@link LanewayAutoConfiguration}; not to be scanned
 * into the application context. The reactive discovery client is preferred, as in Spring Cloud's
 * own {@code LoadBalancerClientConfiguration}.
 */
@Configuration(proxyBeanMethods = false)
@ConditionalOnDiscoveryEnabled
public class LanewayLoadBalancerConfiguration {
    // just before Spring Cloud's own (LoadBalancerClientConfiguration: 193827465 and one more)
    private static final int REACTIVE_ORDER = 193827463;

    @Configuration(proxyBeanMethods = false)
    @ConditionalOnReactiveDiscoveryEnabled
    @Order(REACTIVE_ORDER)
    static class Reactive {
        @Bean
        @ConditionalOnBean(ReactiveDiscoveryClient.class)
        @ConditionalOnMissingBean
        @Conditional(LanewayClientCondition.class)
        ServiceInstanceListSupplier lanewayServiceInstanceListSupplier(ConfigurableApplicationContext context) {
            return ServiceInstanceListSupplier.builder()
                    .withDiscoveryClient()
                    .withCaching()
                    .with(LaneServiceInstanceListSupplier::create)
                    .build(context);
        }
    }

    @Configuration(proxyBeanMethods = false)
    @ConditionalOnBlockingDiscoveryEnabled
    @Order(REACTIVE_ORDER + 1)
    static class Blocking {
        @Bean
        @ConditionalOnBean(DiscoveryClient.class)
        @ConditionalOnMissingBean
        @Conditional(LanewayClientCondition.class)
        ServiceInstanceListSupplier lanewayServiceInstanceListSupplier(ConfigurableApplicationContext context) {
            return ServiceInstanceListSupplier.builder()
                    .withBlockingDiscoveryClient()
                    .withCaching()
                    .with(LaneServiceInstanceListSupplier::create)
                    .build(context);
        }
    }

    /** {@code configurations} is {@code laneway} for this client, or for all and not otherwise for this one. */
    static class LanewayClientCondition implements Condition {
        @Override
        public boolean matches(ConditionContext context, AnnotatedTypeMetadata metadata) {
            return LoadBalancerEnvironmentPropertyUtils.equalToForClientOrDefault(context.getEnvironment(),
                    "configurations", OnLanewayConfigurationCondition.CONFIGURATION);
        }
    }
}
