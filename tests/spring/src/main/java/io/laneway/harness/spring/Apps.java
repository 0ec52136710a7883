package io.laneway.harness.spring;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.springframework.boot.WebApplicationType;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * The applications of this JVM, each its own Spring Boot application context with its own web
 * server and its own Nacos client, started and stopped one at a time.
 */
final class Apps {
    static final String NAME = "harness.name";
    static final String ADDRESS = "harness.address";
    static final String NEXT = "harness.next";

    private final Options options;
    private final Map<String, AppSpec> known = new LinkedHashMap<>();
    private final Map<String, ConfigurableApplicationContext> running = new LinkedHashMap<>();
    private boolean closed;

    Apps(Options options) {
        this.options = options;
        for (AppSpec spec : options.apps) {
            if (known.putIfAbsent(spec.key(), spec) != null) {
                throw new IllegalArgumentException(spec.key() + " given twice");
            }
        }
    }

    List<AppSpec> declared() {
        return new ArrayList<>(known.values());
    }

    /** The application {@code key} names ({@code NAME@IP:PORT}), or a new service from a full spec. */
    synchronized AppSpec resolve(String spec) {
        AppSpec app = known.get(spec);
        if (app != null) {
            return app;
        }
        app = AppSpec.service(spec);
        AppSpec same = known.get(app.key());
        if (same != null && !spec.contains(",")) {
            return same;
        }
        known.put(app.key(), app);
        return app;
    }

    /** The {@code @LoadBalanced RestTemplate} of the running service {@code key}. */
    synchronized org.springframework.web.client.RestTemplate restTemplate(String key) {
        ConfigurableApplicationContext context = running.get(key);
        if (context == null) {
            throw new IllegalArgumentException(key + " is not running");
        }
        return context.getBean("restTemplate", org.springframework.web.client.RestTemplate.class);
    }

    /** Starts {@code app}, registered with Nacos when this returns; prints {@code READY}. */
    synchronized void start(AppSpec app) {
        if (closed) {
            throw new IllegalStateException("shutting down");
        }
        if (running.containsKey(app.key())) {
            throw new IllegalStateException(app.key() + " is running");
        }
        long begin = System.nanoTime();
        SpringApplicationBuilder builder = new SpringApplicationBuilder(app.gateway ? GatewayApp.class : ServiceApp.class)
                .web(app.gateway ? WebApplicationType.REACTIVE : WebApplicationType.SERVLET)
                .registerShutdownHook(false)
                .properties(properties(app));
        ConfigurableApplicationContext context = builder.run();
        running.put(app.key(), context);
        Main.OUT.println("READY " + app.name + " " + app.address() + " ms=" + (System.nanoTime() - begin) / 1_000_000);
    }

    /** Stops the application {@code key} names: it deregisters from Nacos and closes its port. */
    synchronized void stop(String key) {
        ConfigurableApplicationContext context = running.remove(key);
        if (context == null) {
            throw new IllegalStateException(key + " is not running");
        }
        AppSpec app = known.get(key);
        long begin = System.nanoTime();
        context.close();
        Main.OUT.println("STOPPED " + app.name + " " + app.address() + " ms=" + (System.nanoTime() - begin) / 1_000_000);
    }

    /** Stops everything, last started first; no start after this. */
    synchronized void close() {
        closed = true;
        List<String> keys = new ArrayList<>(running.keySet());
        for (int i = keys.size() - 1; i >= 0; i--) {
            try {
                stop(keys.get(i));
            } catch (RuntimeException e) {
                System.err.println("harness: stopping " + keys.get(i) + ": " + e);
            }
        }
    }

    private Map<String, Object> properties(AppSpec app) {
        Map<String, Object> p = new LinkedHashMap<>();
        p.put(NAME, app.name);
        p.put(ADDRESS, app.address());
        p.put("spring.application.name", app.name);
        p.put("server.address", app.ip);
        p.put("server.port", app.port);
        p.put("spring.main.banner-mode", "off");
        p.put("spring.main.log-startup-info", false);
        p.put("spring.jmx.enabled", false);
        p.put("spring.cloud.compatibility-verifier.enabled", false);
        p.put("spring.cloud.refresh.enabled", false);

        p.put("spring.cloud.nacos.discovery.server-addr", options.nacos);
        if (options.username != null) {
            p.put("spring.cloud.nacos.discovery.username", options.username);
            p.put("spring.cloud.nacos.discovery.password", options.password);
        }
        if (options.namespace != null) {
            p.put("spring.cloud.nacos.discovery.namespace", options.namespace);
        }
        p.put("spring.cloud.nacos.discovery.group", options.group);
        p.put("spring.cloud.nacos.discovery.ip", app.ip);
        p.put("spring.cloud.nacos.discovery.port", app.port);
        if (app.lanes != null) {
            p.put("spring.cloud.nacos.discovery.metadata[laneway.lanes]", app.lanes);
        }
        if (app.pod != null) {
            p.put("laneway.pod-name", app.pod);
        }
        p.put("spring.cloud.nacos.discovery.ephemeral", true);
        p.put("spring.cloud.nacos.discovery.fail-fast", true);

        // the one switch of laneway-spring-cloud
        p.put("spring.cloud.loadbalancer.configurations", "laneway");
        if (!options.lbCache) {
            p.put("spring.cloud.loadbalancer.cache.enabled", false);
        }

        if (app.gateway) {
            p.put("spring.cloud.gateway.httpclient.connect-timeout", 2000);
            p.put("spring.cloud.gateway.httpclient.response-timeout", "10s");
            int i = 0;
            for (Map.Entry<String, String> route : options.routes.entrySet()) {
                String r = "spring.cloud.gateway.routes[" + i++ + "].";
                p.put(r + "id", route.getKey());
                p.put(r + "uri", "lb://" + route.getValue());
                p.put(r + "predicates[0]", "Path=/" + route.getKey() + "/**");
                p.put(r + "filters[0]", "StripPrefix=1");
            }
        } else {
            p.put("spring.cloud.gateway.enabled", false);
            p.put("spring.main.lazy-initialization", options.lazy);
            p.put("server.tomcat.threads.max", 32);
            p.put("server.tomcat.threads.min-spare", 2);
            if (app.next != null) {
                p.put(NEXT, app.next);
            }
        }
        return p;
    }
}
