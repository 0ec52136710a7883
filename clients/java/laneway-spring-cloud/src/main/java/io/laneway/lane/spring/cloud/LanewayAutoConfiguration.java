package io.laneway.lane.spring.cloud;

import io.laneway.lane.servlet.LaneFilter;
import io.micrometer.core.instrument.MeterRegistry;
import jakarta.servlet.DispatcherType;
import org.springframework.beans.factory.config.BeanPostProcessor;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnWebApplication;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.boot.web.client.RestClientCustomizer;
import org.springframework.boot.web.client.RestTemplateCustomizer;
import org.springframework.boot.web.reactive.function.client.WebClientCustomizer;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.cloud.loadbalancer.annotation.LoadBalancerClients;
import org.springframework.cloud.loadbalancer.core.ServiceInstanceListSupplier;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Conditional;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.Ordered;
import org.springframework.core.env.Environment;
import org.springframework.web.client.RestClient;
import org.springframework.util.ClassUtils;
import org.springframework.web.client.RestTemplate;
import org.springframework.web.reactive.function.client.WebClient;

/**
 * laneway for Spring Cloud, on with {@code spring.cloud.loadbalancer.configurations=laneway}
 * (or that for one client): Spring Cloud LoadBalancer picks among the instances that serve the
 * request's lane ({@link LanewayLoadBalancerConfiguration}), and the lane goes on with the calls
 * made while serving a request:
 * <ul>
 *   <li>in a servlet application, laneway's {@link LaneFilter}, first of all filters, takes the
 *       lane of each request ({@code x-lane}, else {@code baggage} {@code lane=});
 *   <li>{@link RestTemplate}s, {@code RestClient.Builder}s and {@code WebClient.Builder}s, Spring
 *       Boot's builders and the application's beans alike, put it on every call without one,
 *       before Spring Cloud's load balancer sees the call;
 *   <li>with OpenFeign on the class path, so do Feign clients.
 * </ul>
 * A probed request ({@code kubectl laneway probe}) is answered with the hop records of this
 * application ({@code spring.application.name}, pod {@code laneway.pod-name}) and of the calls it
 * made through a {@code RestTemplate}, {@code RestClient} or {@code WebClient}.
 * With a Micrometer {@code MeterRegistry} bean, requests are counted by lane ({@link LaneMeters}).
 * Property {@code laneway.header} (default {@code x-lane}) names the header, both ways;
 * {@code laneway.metadata-key} (default {@code laneway.lanes}) the instances' metadata key.
 */
@AutoConfiguration(afterName = {
        "org.springframework.boot.actuate.autoconfigure.metrics.MetricsAutoConfiguration",
        "org.springframework.boot.actuate.autoconfigure.metrics.CompositeMeterRegistryAutoConfiguration"})
@ConditionalOnClass(ServiceInstanceListSupplier.class)
@Conditional(OnLanewayConfigurationCondition.class)
@EnableConfigurationProperties(LanewayProperties.class)
@LoadBalancerClients(defaultConfiguration = LanewayLoadBalancerConfiguration.class)
public class LanewayAutoConfiguration {
    private static final String HEADER_PROPERTY = "laneway.header";

    private static final String NACOS_CONFIG = "com.alibaba.nacos.api.config.ConfigService";

    /**
     * The interceptor of load-balanced HTTP calls, drawing calls at RPC entries by the entry rules
     * in Nacos config when the Nacos client is on the class path and discovery has a server.
     */
    static LaneClientHttpRequestInterceptor interceptor(Environment environment) {
        boolean nacos = ClassUtils.isPresent(NACOS_CONFIG, LanewayAutoConfiguration.class.getClassLoader());
        return new LaneClientHttpRequestInterceptor(header(environment),
                nacos ? NacosEntryRules.of(environment) : null);
    }

    // for the post-processors, which must not wait for the properties bean
    static String header(Environment environment) {
        String header = environment.getProperty(HEADER_PROPERTY);
        return header == null || header.isBlank() ? LanewayProperties.DEFAULT_HEADER : header.trim();
    }

    @Configuration(proxyBeanMethods = false)
    @ConditionalOnWebApplication(type = ConditionalOnWebApplication.Type.SERVLET)
    @ConditionalOnClass(name = "jakarta.servlet.Filter")
    static class Servlet {
        @Bean
        @ConditionalOnMissingBean(name = "lanewayLaneFilter")
        FilterRegistrationBean<LaneFilter> lanewayLaneFilter(LanewayProperties properties, Environment environment) {
            FilterRegistrationBean<LaneFilter> registration = new FilterRegistrationBean<>(new LaneFilter(
                    properties.getHeader(), environment.getProperty("spring.application.name"), properties.getPodName()));
            registration.setName("lanewayLaneFilter");
            registration.setOrder(Ordered.HIGHEST_PRECEDENCE);
            registration.setDispatcherTypes(DispatcherType.REQUEST, DispatcherType.ASYNC);
            registration.addUrlPatterns("/*");
            return registration;
        }
    }

    @Configuration(proxyBeanMethods = false)
    @ConditionalOnClass(RestTemplate.class)
    static class RestTemplates {
        @Bean
        RestTemplateCustomizer lanewayRestTemplateCustomizer(Environment environment) {
            return interceptor(environment)::addTo;
        }

        /** {@code RestTemplate} beans the application made itself, {@code @LoadBalanced} ones included. */
        @Bean
        static BeanPostProcessor lanewayRestTemplatePostProcessor(Environment environment) {
            LaneClientHttpRequestInterceptor interceptor = interceptor(environment);
            return new BeanPostProcessor() {
                @Override
                public Object postProcessBeforeInitialization(Object bean, String beanName) {
                    if (bean instanceof RestTemplate) {
                        interceptor.addTo((RestTemplate) bean);
                    }
                    return bean;
                }
            };
        }
    }

    @Configuration(proxyBeanMethods = false)
    @ConditionalOnClass(name = {"org.springframework.web.client.RestClient",
            "org.springframework.boot.web.client.RestClientCustomizer"})
    static class RestClients {
        @Bean
        RestClientCustomizer lanewayRestClientCustomizer(Environment environment) {
            LaneClientHttpRequestInterceptor interceptor = interceptor(environment);
            return builder -> builder.requestInterceptors(interceptor::addTo);
        }

        /** {@code RestClient.Builder} beans the application made itself. */
        @Bean
        static BeanPostProcessor lanewayRestClientPostProcessor(Environment environment) {
            LaneClientHttpRequestInterceptor interceptor = interceptor(environment);
            return new BeanPostProcessor() {
                @Override
                public Object postProcessBeforeInitialization(Object bean, String beanName) {
                    if (bean instanceof RestClient.Builder) {
                        ((RestClient.Builder) bean).requestInterceptors(interceptor::addTo);
                    }
                    return bean;
                }
            };
        }
    }

    @Configuration(proxyBeanMethods = false)
    @ConditionalOnClass(name = "org.springframework.web.reactive.function.client.WebClient")
    static class WebClients {
        @Bean
        WebClientCustomizer lanewayWebClientCustomizer(LanewayProperties properties) {
            LaneExchangeFilterFunction filter = new LaneExchangeFilterFunction(properties.getHeader());
            return builder -> builder.filters(filter::addTo);
        }

        /** {@code WebClient.Builder} beans the application made itself, {@code @LoadBalanced} ones included. */
        @Bean
        static BeanPostProcessor lanewayWebClientPostProcessor(Environment environment) {
            LaneExchangeFilterFunction filter = new LaneExchangeFilterFunction(header(environment));
            return new BeanPostProcessor() {
                @Override
                public Object postProcessBeforeInitialization(Object bean, String beanName) {
                    if (bean instanceof WebClient.Builder) {
                        ((WebClient.Builder) bean).filters(filter::addTo);
                    }
                    return bean;
                }
            };
        }
    }

    @Configuration(proxyBeanMethods = false)
    @ConditionalOnClass(name = "io.micrometer.core.instrument.MeterRegistry")
    static class Meters {
        /** Counts requests by lane where the application's metrics go, when it has a MeterRegistry. */
        @Bean
        @ConditionalOnBean(MeterRegistry.class)
        LaneMeters lanewayLaneMeters(MeterRegistry registry) {
            return new LaneMeters(registry);
        }
    }

    @Configuration(proxyBeanMethods = false)
    @ConditionalOnClass(name = "feign.RequestInterceptor")
    static class Feign {
        @Bean
        @ConditionalOnMissingBean
        LaneFeignInterceptor lanewayFeignInterceptor(LanewayProperties properties) {
            return new LaneFeignInterceptor(properties.getHeader());
        }
    }
}
