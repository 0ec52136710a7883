package io.laneway.lane.spring.cloud;

import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import java.util.concurrent.Executor;
import java.util.function.Function;
import java.util.logging.Level;
import java.util.logging.Logger;

import com.alibaba.nacos.api.NacosFactory;
import com.alibaba.nacos.api.PropertyKeyConst;
import com.alibaba.nacos.api.config.ConfigService;
import com.alibaba.nacos.api.config.listener.Listener;
import com.alibaba.nacos.api.exception.NacosException;
import io.laneway.lane.EntryRules;
import org.springframework.core.env.Environment;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import org.yaml.snakeyaml.constructor.SafeConstructor;

/**
 * The entry rules of each service, kept live from Nacos config through the Nacos client the
 * application already has for discovery (same server, namespace and credentials): dataId
 * {@code <service>.laneway-entry}, group {@code dubbo}. The client connects on the first draw.
 * Until a document is read, and after it is removed, nothing is drawn; a failure is logged once.
 */
final class NacosEntryRules implements Function<String, EntryRules> {
    private static final Logger LOG = Logger.getLogger("io.laneway.lane.spring.cloud");
    static final String GROUP = "dubbo";
    static final String SUFFIX = ".laneway-entry";
    private static final String PREFIX = "spring.cloud.nacos.discovery.";

    private final Properties properties;
    private final ConcurrentMap<String, Rules> byService = new ConcurrentHashMap<>();
    private volatile ConfigService config;
    private volatile boolean warned;

    private NacosEntryRules(Properties properties) {
        this.properties = properties;
    }

    /** Rules read from the Nacos server the application discovers through, if it has one. */
    static NacosEntryRules of(Environment environment) {
        String server = environment.getProperty(PREFIX + "server-addr");
        if (server == null || server.isBlank()) {
            return null;
        }
        Properties p = new Properties();
        p.setProperty(PropertyKeyConst.SERVER_ADDR, server);
        copy(environment, p, "namespace", PropertyKeyConst.NAMESPACE);
        copy(environment, p, "username", PropertyKeyConst.USERNAME);
        copy(environment, p, "password", PropertyKeyConst.PASSWORD);
        return new NacosEntryRules(p);
    }

    private static void copy(Environment environment, Properties p, String key, String to) {
        String value = environment.getProperty(PREFIX + key);
        if (value != null && !value.isBlank()) {
            p.setProperty(to, value);
        }
    }

    @Override
    public EntryRules apply(String service) {
        Rules rules = byService.get(service);
        if (rules == null) {
            rules = byService.computeIfAbsent(service, this::subscribe);
        }
        return rules.current;
    }

    private Rules subscribe(String service) {
        Rules rules = new Rules();
        try {
            String content = configService().getConfigAndSignListener(service + SUFFIX, GROUP, 3000, rules);
            rules.receiveConfigInfo(content);
        } catch (NacosException | RuntimeException e) {
            warnOnce("cannot read " + service + SUFFIX + " from Nacos; calls in no lane stay on baseline", e);
        }
        return rules;
    }

    private ConfigService configService() throws NacosException {
        ConfigService c = config;
        if (c == null) {
            synchronized (this) {
                if (config == null) {
                    config = NacosFactory.createConfigService(properties);
                }
                c = config;
            }
        }
        return c;
    }

    static EntryRules parse(String content) {
        return EntryRules.of(new Yaml(new SafeConstructor(new LoaderOptions())).load(content));
    }

    private void warnOnce(String message, Exception e) {
        if (!warned) {
            warned = true;
            LOG.log(Level.WARNING, "laneway: " + message, e);
        }
    }

    /** One service's rules, replaced whenever Nacos pushes its document. */
    private final class Rules implements Listener {
        volatile EntryRules current = EntryRules.NONE;

        @Override
        public Executor getExecutor() {
            return null;
        }

        @Override
        public void receiveConfigInfo(String content) {
            if (content == null || content.isBlank()) {
                current = EntryRules.NONE;
                return;
            }
            try {
                current = parse(content);
            } catch (RuntimeException e) {
                warnOnce("cannot parse an entry document; keeping the previous rules", e);
            }
        }
    }
}
