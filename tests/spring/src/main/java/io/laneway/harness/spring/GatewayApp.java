package io.laneway.harness.spring;

import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;

/**
 * A Spring Cloud Gateway (WebFlux): routes {@code /PATH/**} to {@code lb://SERVICE} with the
 * prefix stripped, all set as properties by {@link Apps}. Its load balancer chooses by the
 * request's {@code x-lane} (laneway-spring-cloud), and the header goes on to the service.
 */
@SpringBootConfiguration(proxyBeanMethods = false)
@EnableAutoConfiguration
public class GatewayApp {
}
