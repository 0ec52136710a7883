package io.laneway.lane.dubbo;

import java.util.function.Supplier;
import java.util.logging.Level;

import io.laneway.lane.MessageOwnership;
import org.apache.dubbo.common.config.configcenter.ConfigChangeType;
import org.apache.dubbo.common.config.configcenter.ConfigChangedEvent;
import org.apache.dubbo.common.config.configcenter.ConfigurationListener;
import org.apache.dubbo.rpc.cluster.governance.GovernanceRuleRepository;
import org.apache.dubbo.rpc.model.ApplicationModel;

/**
 * The ownership document of one application from the config centre the application's Dubbo
 * already uses (Dubbo's rule repository, as the tag router reads its rules): key
 * {@code <application>.laneway-messages}, group {@code dubbo}, kept live. Deleted, it is no
 * document; one that cannot be parsed leaves the last good document in force.
 */
public final class DubboMessageOwnership implements Supplier<MessageOwnership>, ConfigurationListener, AutoCloseable {
    static final String SUFFIX = ".laneway-messages";

    private final String key;
    private final GovernanceRuleRepository repository;
    private volatile MessageOwnership current = MessageOwnership.BASELINE;
    private volatile boolean warned;

    private DubboMessageOwnership(String application, GovernanceRuleRepository repository) {
        this.key = application + SUFFIX;
        this.repository = repository;
    }

    /** Subscribes to {@code application}'s document; without Dubbo, baseline owns everything. */
    public static Supplier<MessageOwnership> of(String application) {
        try {
            GovernanceRuleRepository repository = ApplicationModel.defaultModel().getDefaultModule()
                    .getExtensionLoader(GovernanceRuleRepository.class).getDefaultExtension();
            DubboMessageOwnership ownership = new DubboMessageOwnership(application, repository);
            repository.addListener(ownership.key, ownership);
            String content = repository.getRule(ownership.key, GovernanceRuleRepository.DEFAULT_GROUP);
            if (content != null) {
                ownership.accept(content);
            }
            return ownership;
        } catch (RuntimeException | LinkageError e) {
            DubboEntry.LOG.log(Level.WARNING, "laneway: cannot read " + application + SUFFIX
                    + " from Dubbo's config centre; baseline handles every record", e);
            return () -> MessageOwnership.BASELINE;
        }
    }

    @Override
    public MessageOwnership get() {
        return current;
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
        repository.removeListener(key, this);
    }
}
