package io.laneway.lane.spring.cloud;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import io.laneway.lane.LaneMetrics;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.assertj.AssertableApplicationContext;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.boot.web.client.RestTemplateCustomizer;
import org.springframework.boot.web.reactive.function.client.WebClientCustomizer;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.cloud.client.discovery.composite.CompositeDiscoveryClientAutoConfiguration;
import org.springframework.cloud.client.discovery.composite.reactive.ReactiveCompositeDiscoveryClientAutoConfiguration;
import org.springframework.cloud.client.discovery.simple.SimpleDiscoveryClientAutoConfiguration;
import org.springframework.cloud.client.discovery.simple.reactive.SimpleReactiveDiscoveryClientAutoConfiguration;
import org.springframework.cloud.commons.util.UtilAutoConfiguration;
import org.springframework.cloud.loadbalancer.config.LoadBalancerAutoConfiguration;
import org.springframework.cloud.loadbalancer.config.LoadBalancerCacheAutoConfiguration;
import org.springframework.cloud.loadbalancer.core.CachingServiceInstanceListSupplier;
import org.springframework.cloud.loadbalancer.core.DelegatingServiceInstanceListSupplier;
import org.springframework.cloud.loadbalancer.core.ServiceInstanceListSupplier;
import org.springframework.cloud.loadbalancer.support.LoadBalancerClientFactory;

class LanewayAutoConfigurationTest {
    private static final String ON = "spring.cloud.loadbalancer.configurations=laneway";

    private static final AutoConfigurations CONFIGS = AutoConfigurations.of(
            UtilAutoConfiguration.class, SimpleDiscoveryClientAutoConfiguration.class,
            CompositeDiscoveryClientAutoConfiguration.class,
            LoadBalancerAutoConfiguration.class, LanewayAutoConfiguration.class);

    private final ApplicationContextRunner runner = new ApplicationContextRunner()
            .withConfiguration(CONFIGS)
            .withPropertyValues("spring.cloud.loadbalancer.cache.enabled=false",
                    "spring.cloud.discovery.client.simple.instances.order-service[0].uri=http://198.18.0.5:8080",
                    "spring.cloud.discovery.client.simple.instances.user-service[0].uri=http://198.18.0.7:8080");

    private static ServiceInstanceListSupplier supplier(AssertableApplicationContext context, String service) {
        return context.getBean(LoadBalancerClientFactory.class).getInstance(service, ServiceInstanceListSupplier.class);
    }

    private static LaneServiceInstanceListSupplier lane(ServiceInstanceListSupplier supplier) {
        while (supplier instanceof DelegatingServiceInstanceListSupplier) {
            if (supplier instanceof LaneServiceInstanceListSupplier) {
                return (LaneServiceInstanceListSupplier) supplier;
            }
            supplier = ((DelegatingServiceInstanceListSupplier) supplier).getDelegate();
        }
        return null;
    }

    @Test
    void withThePropertyEveryClientChoosesByLane() {
        runner.withPropertyValues(ON).run(context -> {
            assertTrue(context.getStartupFailure() == null, () -> String.valueOf(context.getStartupFailure()));
            assertEquals(1, context.getBeansOfType(LanewayProperties.class).size());
            assertInstanceOf(LaneServiceInstanceListSupplier.class, supplier(context, "order-service"));
            assertInstanceOf(LaneServiceInstanceListSupplier.class, supplier(context, "user-service"));
            assertEquals(1, context.getBeansOfType(RestTemplateCustomizer.class).size());
            assertEquals(1, context.getBeansOfType(WebClientCustomizer.class).size());
            assertEquals(1, context.getBeansOfType(LaneFeignInterceptor.class).size());
            // not a servlet application
            assertEquals(0, context.getBeansOfType(FilterRegistrationBean.class).size());
        });
    }

    @Test
    void withoutItNothingIsThere() {
        runner.run(context -> {
            assertTrue(context.getStartupFailure() == null, () -> String.valueOf(context.getStartupFailure()));
            assertEquals(0, context.getBeansOfType(LanewayProperties.class).size());
            assertNull(lane(supplier(context, "order-service")));
            assertEquals(0, context.getBeansOfType(RestTemplateCustomizer.class).size());
            assertEquals(0, context.getBeansOfType(LaneFeignInterceptor.class).size());
        });
        runner.withPropertyValues("spring.cloud.loadbalancer.configurations=zone-preference").run(context -> {
            assertEquals(0, context.getBeansOfType(LanewayProperties.class).size());
            assertNull(lane(supplier(context, "order-service")));
        });
    }

    @Test
    void forOneClientOnlyThatClientChoosesByLane() {
        runner.withPropertyValues("spring.cloud.loadbalancer.clients.order-service.configurations=laneway")
                .run(context -> {
                    assertEquals(1, context.getBeansOfType(LanewayProperties.class).size());
                    assertInstanceOf(LaneServiceInstanceListSupplier.class, supplier(context, "order-service"));
                    assertNull(lane(supplier(context, "user-service")));
                });
        // and a client can opt out of the default
        runner.withPropertyValues(ON, "spring.cloud.loadbalancer.clients.user-service.configurations=default")
                .run(context -> {
                    assertInstanceOf(LaneServiceInstanceListSupplier.class, supplier(context, "order-service"));
                    assertNull(lane(supplier(context, "user-service")));
                });
    }

    @Test
    void theReactiveDiscoveryClientIsUsedWhenThereIsOne() {
        runner.withConfiguration(AutoConfigurations.of(SimpleReactiveDiscoveryClientAutoConfiguration.class,
                        ReactiveCompositeDiscoveryClientAutoConfiguration.class))
                .withPropertyValues(ON)
                .run(context -> {
                    ServiceInstanceListSupplier supplier = supplier(context, "order-service");
                    assertInstanceOf(LaneServiceInstanceListSupplier.class, supplier);
                    assertEquals(List.of("198.18.0.5"), supplier.get().blockFirst().stream()
                            .map(i -> i.getHost()).toList());
                });
    }

    @Test
    void theLaneComesAfterTheCacheWhichWouldHideTheRequest() {
        runner.withConfiguration(AutoConfigurations.of(LoadBalancerCacheAutoConfiguration.class))
                .withPropertyValues(ON, "spring.cloud.loadbalancer.cache.enabled=true")
                .run(context -> {
                    ServiceInstanceListSupplier supplier = supplier(context, "order-service");
                    assertInstanceOf(LaneServiceInstanceListSupplier.class, supplier);
                    assertInstanceOf(CachingServiceInstanceListSupplier.class,
                            ((LaneServiceInstanceListSupplier) supplier).getDelegate());
                });
    }

    @Test
    void propertiesSetHeaderAndMetadataKey() {
        runner.withPropertyValues(ON, "laneway.header=x-env", "laneway.metadata-key=lanes").run(context -> {
            LaneServiceInstanceListSupplier supplier = lane(supplier(context, "order-service"));
            assertEquals("x-env", supplier.header());
            assertEquals("lanes", supplier.metadataKey());
            assertEquals("x-env", context.getBean(LaneFeignInterceptor.class).header());
        });
    }

    @Test
    void inAServletApplicationLanewaysFilterComesFirst() {
        new WebApplicationContextRunner().withConfiguration(CONFIGS).withPropertyValues(ON).run(context -> {
            FilterRegistrationBean<?> registration = context.getBean("lanewayLaneFilter", FilterRegistrationBean.class);
            assertInstanceOf(io.laneway.lane.servlet.LaneFilter.class, registration.getFilter());
            assertEquals(Integer.MIN_VALUE, registration.getOrder());
        });
        new WebApplicationContextRunner().withConfiguration(CONFIGS).run(context ->
                assertFalse(context.containsBean("lanewayLaneFilter")));
    }

    @Test
    void withAMeterRegistryRequestsAreCountedByLaneAndHowItWasLearntAndFailuresByLane() {
        runner.withPropertyValues(ON).withBean(MeterRegistry.class, SimpleMeterRegistry::new).run(context -> {
            assertEquals(1, context.getBeansOfType(LaneMeters.class).size());
            LaneMetrics.countServed("dev-alice", "header");
            LaneMetrics.countServed(null, null);
            LaneMetrics.countLost("dev-alice");
            LaneMetrics.countFailed("gray");
            MeterRegistry registry = context.getBean(MeterRegistry.class);
            assertEquals(1.0, registry.get(LaneMeters.REQUESTS).tags("lane", "dev-alice", "learnt", "header").counter().count());
            assertEquals(1.0, registry.get(LaneMeters.REQUESTS).tags("lane", "none", "learnt", "none").counter().count());
            assertEquals(1.0, registry.get(LaneMeters.LOST).tags("caller_lane", "dev-alice").counter().count());
            assertEquals(1.0, registry.get(LaneMeters.FAILED).tags("lane", "gray").counter().count());
        });
        runner.withPropertyValues(ON).run(context -> assertEquals(0, context.getBeansOfType(LaneMeters.class).size()));
    }
}
