package io.laneway.lane.spring.cloud;

import java.util.Map;

import org.springframework.boot.autoconfigure.condition.ConditionOutcome;
import org.springframework.boot.autoconfigure.condition.SpringBootCondition;
import org.springframework.boot.context.properties.bind.Bindable;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.context.annotation.ConditionContext;
import org.springframework.core.env.Environment;
import org.springframework.core.type.AnnotatedTypeMetadata;

/**
 * Matches when Spring Cloud LoadBalancer is told to use laneway's configuration:
 * {@code spring.cloud.loadbalancer.configurations=laneway}, or the same for one client,
 * {@code spring.cloud.loadbalancer.clients.<service>.configurations=laneway}.
 */
class OnLanewayConfigurationCondition extends SpringBootCondition {
    static final String CONFIGURATION = "laneway";
    static final String PROPERTY = "spring.cloud.loadbalancer.configurations";
    private static final String CLIENTS = "spring.cloud.loadbalancer.clients";
    private static final String SUFFIX = ".configurations";

    @Override
    public ConditionOutcome getMatchOutcome(ConditionContext context, AnnotatedTypeMetadata metadata) {
        Environment environment = context.getEnvironment();
        if (CONFIGURATION.equalsIgnoreCase(trim(environment.getProperty(PROPERTY)))) {
            return ConditionOutcome.match(PROPERTY + " is " + CONFIGURATION);
        }
        Map<String, String> clients = Binder.get(environment)
                .bind(CLIENTS, Bindable.mapOf(String.class, String.class))
                .orElse(Map.of());
        for (Map.Entry<String, String> e : clients.entrySet()) {
            if (e.getKey().endsWith(SUFFIX) && CONFIGURATION.equalsIgnoreCase(trim(e.getValue()))) {
                return ConditionOutcome.match(CLIENTS + "." + e.getKey() + " is " + CONFIGURATION);
            }
        }
        return ConditionOutcome.noMatch(PROPERTY + " is not " + CONFIGURATION);
    }

    private static String trim(String value) {
        return value == null ? null : value.trim();
    }
}
