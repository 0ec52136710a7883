package io.laneway.harness.spring;

import java.time.Duration;

import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.web.client.RestTemplateBuilder;
import org.springframework.cloud.client.loadbalancer.LoadBalanced;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.http.client.ReactorResourceFactory;
import org.springframework.web.client.RestTemplate;

/**
 * A Spring MVC service: {@code GET /hop} ({@link HopController}), calling the next service through
 * a {@code @LoadBalanced RestTemplate}. laneway-spring-cloud, switched on by
 * {@code spring.cloud.loadbalancer.configurations=laneway}, takes the lane of the request and
 * puts it on that call.
 */
@SpringBootConfiguration(proxyBeanMethods = false)
@EnableAutoConfiguration
@Import(HopController.class)
public class ServiceApp {
    @Bean
    @LoadBalanced
    RestTemplate restTemplate(RestTemplateBuilder builder) {
        return builder.setConnectTimeout(Duration.ofSeconds(2)).setReadTimeout(Duration.ofSeconds(10)).build();
    }

    /**
     * Reactor Netty resources of this application's own (should anything here use them), not the
     * JVM's global ones that Spring Boot's default takes: closing this application would
     * otherwise shut the event loops the gateway of the same JVM runs on.
     */
    @Bean
    ReactorResourceFactory reactorResourceFactory() {
        ReactorResourceFactory factory = new ReactorResourceFactory();
        factory.setUseGlobalResources(false);
        return factory;
    }
}
