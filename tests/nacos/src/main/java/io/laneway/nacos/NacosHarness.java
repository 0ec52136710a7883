package io.laneway.nacos;

import com.alibaba.nacos.NacosServerBasicApplication;
import com.alibaba.nacos.NacosServerWebApplication;
import com.alibaba.nacos.core.listener.startup.NacosStartUp;
import com.alibaba.nacos.core.listener.startup.NacosStartUpManager;
import com.alibaba.nacos.sys.env.DeploymentType;
import com.alibaba.nacos.sys.env.EnvUtil;
import java.nio.file.Files;
import java.nio.file.Path;
import org.springframework.boot.Banner;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * Runs a standalone Nacos 3.x server (no console UI) in one JVM.
 *
 * <p>The Maven Central artefacts carry Nacos' server modules but not its bootstrap module, so this
 * class plays that role: it starts the "core" phase as a non-web Spring context and the "web" phase
 * (HTTP OpenAPI on {@code nacos.server.main.port}, gRPC on that port + 1000) as its child context.
 *
 * <p>Settings come from system properties ({@code -Dkey=value}) over the defaults in this jar's
 * {@code application.properties}. Required: {@code -Dnacos.home=DIR}; Derby data, Nacos' log files
 * and derby.log all go below it. Prints {@code READY nacos http=127.0.0.1:P grpc=127.0.0.1:P+1000 ms=N}
 * on stdout once both contexts are up; Spring's console log goes to stdout as well.
 */
public final class NacosHarness {

    private NacosHarness() {}

    public static void main(String[] args) throws Exception {
        long started = System.nanoTime();
        String home = System.getProperty("nacos.home");
        if (home == null || home.isBlank()) {
            System.err.println("nacos harness: -Dnacos.home=DIR is required");
            System.exit(2);
        }
        Files.createDirectories(Path.of(home, "conf"));
        defaultProperty("nacos.standalone", "true");
        defaultProperty("nacos.server.main.port", "8848");
        // both contexts read the port: the core one through server.port, which Nacos' own
        // nacos-server.properties only sets for the web context
        defaultProperty("server.port", System.getProperty("nacos.server.main.port"));
        defaultProperty("nacos.deployment.type", "server");
        // Nacos' own log files (nacos.log, config-*.log, naming-*.log, alipay-jraft.log...) default
        // to ~/nacos/logs
        defaultProperty("nacos.logs.path", Path.of(home, "logs").toString());
        // embedded Derby writes derby.log into the working directory unless told otherwise
        defaultProperty("derby.stream.error.file", Path.of(home, "derby.log").toString());
        EnvUtil.setDeploymentType(DeploymentType.SERVER);

        NacosStartUpManager.start(NacosStartUp.CORE_START_UP_PHASE);
        ConfigurableApplicationContext core = new SpringApplicationBuilder(NacosServerBasicApplication.class)
                .web(WebApplicationType.NONE)
                .bannerMode(Banner.Mode.OFF)
                .run(args);

        NacosStartUpManager.start(NacosStartUp.WEB_START_UP_PHASE);
        new SpringApplicationBuilder(NacosServerWebApplication.class)
                .parent(core)
                .bannerMode(Banner.Mode.OFF)
                .run(args);

        int port = Integer.parseInt(System.getProperty("nacos.server.main.port"));
        System.out.printf("READY nacos http=127.0.0.1:%d grpc=127.0.0.1:%d ms=%d%n", port, port + 1000,
                (System.nanoTime() - started) / 1_000_000);
        System.out.flush();
    }

    private static void defaultProperty(String key, String value) {
        if (System.getProperty(key) == null) {
            System.setProperty(key, value);
        }
    }
}
