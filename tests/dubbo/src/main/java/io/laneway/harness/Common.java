package io.laneway.harness;

import java.util.HashMap;
import java.util.Map;

import org.apache.dubbo.config.ApplicationConfig;
import io.laneway.demo.Hop;
import org.apache.dubbo.config.ConfigCenterConfig;
import org.apache.dubbo.config.ProtocolConfig;
import org.apache.dubbo.config.ReferenceConfig;
import org.apache.dubbo.config.RegistryConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;

/** Dubbo settings shared by provider and consumer. */
final class Common {
    static ApplicationConfig application(String name, String registerMode) {
        ApplicationConfig app = new ApplicationConfig(name);
        app.setQosEnable(false);
        app.setEnableFileCache(false);
        app.setMetadataType("local");
        if (registerMode != null) {
            app.setRegisterMode(registerMode);
        }
        return app;
    }

    static RegistryConfig registry(String zk) {
        RegistryConfig reg = new RegistryConfig("zookeeper://" + zk);
        reg.setTimeout(5000);
        reg.setSession(10000);
        // ZooKeeper is the config centre (configured explicitly below), not the metadata centre.
        reg.setUseAsConfigCenter(false);
        reg.setUseAsMetadataCenter(false);
        reg.setEnableEmptyProtection(false);
        Map<String, String> params = new HashMap<>();
        params.put("file-cache", "false");
        reg.setParameters(params);
        return reg;
    }

    /** Tag-router rules are read from /dubbo/config/dubbo/&lt;app&gt;.tag-router. */
    static ConfigCenterConfig configCenter(String zk) {
        ConfigCenterConfig cc = new ConfigCenterConfig();
        cc.setAddress("zookeeper://" + zk);
        cc.setTimeout(5000L);
        cc.setCheck(true);
        return cc;
    }

    /** A provider pod: --app, --id, --ip, --port (default 20880) and --zk. */
    record Pod(String app, String id, String ip, int port, String zk) {
        static Pod of(Args args) {
            return new Pod(args.require("app"), args.require("id"), args.require("ip"),
                    args.getInt("port", 20880), args.require("zk"));
        }

        /** Dubbo for this pod's application, with ZooKeeper as registry and config centre. */
        DubboBootstrap bootstrap(String registerMode) {
            // dubbo.protocol.host: registered address, and (no DUBBO_IP_TO_BIND) also the bind address
            ProtocolConfig protocol = new ProtocolConfig("dubbo", port);
            protocol.setHost(ip);
            return DubboBootstrap.getInstance()
                    .application(application(app, registerMode))
                    .registry(registry(zk))
                    .configCenter(configCenter(zk))
                    .protocol(protocol);
        }
    }

    /** A reference to application {@code app}'s {@link Hop} (its group is the app's name). */
    static ReferenceConfig<Hop> hopReference(String app) {
        ReferenceConfig<Hop> ref = new ReferenceConfig<>();
        ref.setInterface(Hop.class);
        ref.setGroup(app);
        ref.setProvidedBy(app);
        ref.setCheck(false);
        ref.setTimeout(2000);
        ref.setRetries(0);
        ref.setLoadbalance("roundrobin");
        Map<String, String> params = new HashMap<>();
        params.put("migration.step", "FORCE_INTERFACE");
        ref.setParameters(params);
        return ref;
    }

    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }

    private Common() {}
}
