package io.laneway.lane.dubbo;

import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.logging.Level;
import java.util.logging.Logger;

import io.laneway.lane.EntryRules;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.common.config.configcenter.ConfigChangeType;
import org.apache.dubbo.common.config.configcenter.ConfigChangedEvent;
import org.apache.dubbo.common.config.configcenter.ConfigurationListener;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.cluster.ClusterInvoker;
import org.apache.dubbo.rpc.cluster.governance.GovernanceRuleRepository;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import org.yaml.snakeyaml.constructor.SafeConstructor;

/**
 * The entry rules of one provider application, kept live from the config centre the application
 * already uses (Dubbo's rule repository, as the tag router reads its rules): key
 * {@code <application>.laneway-entry}, group {@code dubbo}. Until a document is read, and after
 * one is deleted, nothing is drawn; a document that cannot be read is logged once and leaves the
 * last good rules in force.
 */
final class DubboEntry implements ConfigurationListener {
    static final Logger LOG = Logger.getLogger("io.laneway.lane.dubbo");
    static final String SUFFIX = ".laneway-entry";

    private static final ConcurrentMap<String, DubboEntry> BY_APPLICATION = new ConcurrentHashMap<>();

    private final String key;
    private volatile EntryRules rules = EntryRules.NONE;
    private volatile boolean warned;

    private DubboEntry(String application) {
        this.key = application + SUFFIX;
    }

    /** The lane a call in no lane to {@code invoker}'s providers enters, or {@code null}. */
    static String draw(Invoker<?> invoker, Invocation invocation) {
        EntryRules rules = rulesOf(invoker);
        if (rules.isEmpty()) {
            return null;
        }
        return rules.draw(new DubboCall(invocation), ThreadLocalRandom.current().nextInt(100));
    }

    static EntryRules rulesOf(Invoker<?> invoker) {
        URL provider = firstProvider(invoker);
        String application = provider == null ? null : provider.getRemoteApplication();
        if (application == null || application.isEmpty()) {
            return EntryRules.NONE;
        }
        DubboEntry entry = BY_APPLICATION.get(application);
        if (entry == null) {
            entry = BY_APPLICATION.computeIfAbsent(application, a -> new DubboEntry(a).subscribe(provider));
        }
        return entry.rules;
    }

    // the providers' application, as Dubbo's tag router finds it
    private static URL firstProvider(Invoker<?> invoker) {
        if (!(invoker instanceof ClusterInvoker) || ((ClusterInvoker<?>) invoker).getDirectory() == null) {
            return null;
        }
        List<? extends Invoker<?>> all = ((ClusterInvoker<?>) invoker).getDirectory().getAllInvokers();
        return all == null || all.isEmpty() ? null : all.get(0).getUrl();
    }

    private DubboEntry subscribe(URL url) {
        try {
            GovernanceRuleRepository repository = url.getOrDefaultModuleModel()
                    .getExtensionLoader(GovernanceRuleRepository.class)
                    .getDefaultExtension();
            repository.addListener(key, this);
            String content = repository.getRule(key, GovernanceRuleRepository.DEFAULT_GROUP);
            if (content != null) {
                accept(content);
            }
        } catch (RuntimeException e) {
            warnOnce("cannot read " + key + " from the config centre; calls in no lane stay on baseline", e);
        }
        return this;
    }

    @Override
    public void process(ConfigChangedEvent event) {
        if (event.getChangeType() == ConfigChangeType.DELETED) {
            rules = EntryRules.NONE;
        } else {
            accept(event.getContent());
        }
    }

    void accept(String content) {
        try {
            rules = parse(content);
        } catch (RuntimeException e) {
            warnOnce("cannot parse " + key + "; keeping the previous entry rules", e);
        }
    }

    static EntryRules parse(String content) {
        Object document = new Yaml(new SafeConstructor(new LoaderOptions())).load(content);
        return EntryRules.of(document);
    }

    private void warnOnce(String message, Exception e) {
        if (!warned) {
            warned = true;
            LOG.log(Level.WARNING, "laneway: " + message, e);
        }
    }

    /** What a draw reads of a Dubbo call: its attachments and arguments. */
    static final class DubboCall implements EntryRules.Call {
        private final Invocation invocation;

        DubboCall(Invocation invocation) {
            this.invocation = invocation;
        }

        @Override
        public String attachment(String key) {
            Object value = invocation.getObjectAttachmentWithoutConvert(key);
            return value == null ? null : value.toString();
        }

        @Override
        public String argument(int index) {
            Object[] arguments = invocation.getArguments();
            if (arguments == null || index >= arguments.length || arguments[index] == null) {
                return null;
            }
            return arguments[index].toString();
        }
    }
}
