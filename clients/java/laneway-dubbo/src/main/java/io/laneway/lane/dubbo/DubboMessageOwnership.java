package io.laneway.lane.dubbo;

import java.util.function.Supplier;
import java.util.logging.Level;

import io.laneway.lane.MessageOwnership;
import org.apache.dubbo.common.config.configcenter.ConfigChangeType;
import org.apache.dubbo.common.config.configcenter.ConfigChangedEvent;
import org.apache.dubbo.common.config.configcenter.ConfigurationListener;
import org.apache.dubbo.rpc.cluster.governance.GovernanceRuleRepository;
import org.apache.dubbo.rpc.model.ApplicationModel;
import org.apache.dubbo.rpc.model.ModuleModel;

/**
 * The ownership document of one application from the config centre the application's Dubbo
 * already uses (Dubbo's rule repository, as the tag router reads its rules): key
 * {@code <application>.laneway-messages}, group {@code dubbo}, kept live. Deleted, it is no
 * document; one that cannot be parsed leaves the last good document in force.
 *
 * <p>A consumer may start before Dubbo does (Dubbo's Spring Boot starter starts it when the
 * context is refreshed, after the message listeners): until Dubbo's config centre is up and the
 * document read, {@link #get()} waits, since a tier that guessed would drop messages that another
 * tier drops too. Dubbo started without a config centre means no document: baseline owns every
 * message.
 */
public final class DubboMessageOwnership implements Supplier<MessageOwnership>, ConfigurationListener, AutoCloseable {
    static final String SUFFIX = ".laneway-messages";

    private final String key;
    private final ModuleModel module;
    private final GovernanceRuleRepository repository;
    private volatile MessageOwnership current = MessageOwnership.BASELINE;
    private volatile boolean subscribed;
    private volatile boolean warned;

    private DubboMessageOwnership(String application, ModuleModel module) {
        this.key = application + SUFFIX;
        this.module = module;
        this.repository = module.getExtensionLoader(GovernanceRuleRepository.class).getDefaultExtension();
    }

    /** Follows {@code application}'s document; without Dubbo, baseline owns everything. */
    public static Supplier<MessageOwnership> of(String application) {
        try {
            DubboMessageOwnership ownership = new DubboMessageOwnership(application,
                    ApplicationModel.defaultModel().getDefaultModule());
            ownership.subscribe();
            return ownership;
        } catch (RuntimeException | LinkageError e) {
            DubboEntry.LOG.log(Level.WARNING, "laneway: cannot read " + application + SUFFIX
                    + " from Dubbo's config centre; baseline handles every message", e);
            return () -> MessageOwnership.BASELINE;
        }
    }

    /** The document in force; waits for Dubbo's config centre the first time, if it is not up yet. */
    @Override
    public MessageOwnership get() {
        if (!subscribed) {
            await();
        }
        return current;
    }

    private synchronized void await() {
        boolean told = false;
        while (!subscribe()) {
            if (!told) {
                told = true;
                DubboEntry.LOG.info("laneway: waiting for Dubbo's config centre to read " + key
                        + " before handling messages");
            }
            try {
                Thread.sleep(100);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted waiting for " + key, e);
            }
        }
    }

    /** Reads the document and follows it once Dubbo's config centre is up; whether it is done. */
    private synchronized boolean subscribe() {
        if (subscribed) {
            return true;
        }
        if (module.modelEnvironment().getDynamicConfiguration().isEmpty()) {
            if (!module.getApplicationModel().getDeployer().isStarted()) {
                return false;
            }
            DubboEntry.LOG.warning("laneway: Dubbo runs without a config centre, so " + key
                    + " cannot be read; baseline handles every message");
        } else {
            repository.addListener(key, this);
            String content = repository.getRule(key, GovernanceRuleRepository.DEFAULT_GROUP);
            if (content != null) {
                accept(content);
            }
        }
        subscribed = true;
        return true;
    }

    @Override
    public void process(ConfigChangedEvent event) {
        if (event.getChangeType() == ConfigChangeType.DELETED) {
            current = MessageOwnership.BASELINE;
        } else {
            accept(event.getContent());
        }
    }

    void accept(String content) {
        try {
            current = MessageOwnership.parse(content);
        } catch (RuntimeException e) {
            if (!warned) {
                warned = true;
                DubboEntry.LOG.log(Level.WARNING,
                        "laneway: cannot parse " + key + "; keeping the previous message ownership: " + e);
            }
        }
    }

    /** Stops following the document. */
    @Override
    public void close() {
        if (subscribed) {
            repository.removeListener(key, this);
        }
    }
}
