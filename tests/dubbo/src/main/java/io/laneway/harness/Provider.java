package io.laneway.harness;

import java.util.concurrent.CountDownLatch;

import io.laneway.demo.Echo;
import org.apache.dubbo.config.ServiceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;

/**
 * One Dubbo provider process (stands for one pod): exports io.laneway.demo.Echo for application
 * --app on --ip:--port, registered in ZooKeeper. Prints a READY line once exported and registered.
 */
final class Provider {
    static void run(Args args) throws Exception {
        Common.Pod pod = Common.Pod.of(args);
        String tag = args.get("tag", "");
        // interface: classic interface-level registration (/dubbo/<interface>/providers)
        // instance:  application-level service discovery (/services/<app>)
        // all:       both (Dubbo's default)
        String mode = args.get("mode", "interface");
        String group = args.get("group", pod.app());

        String ip = pod.ip();
        if (ip.startsWith("127.") || ip.equals("0.0.0.0") || ip.equalsIgnoreCase("localhost")) {
            // Dubbo treats 127.x as "no address": it registers the machine's first non-loopback
            // address instead and binds 0.0.0.0; consumers dial the machine's address instead of
            // 127.x; and TagStateRouter cannot match ip:port patterns against loopback providers.
            throw new IllegalArgumentException("--ip must be a non-loopback address (run inside"
                    + " tests/dubbo/netns.sh, which puts pod IPs on a private lo), got " + ip);
        }

        DubboBootstrap bootstrap = pod.bootstrap(mode);
        ServiceConfig<Echo> service = new ServiceConfig<>();
        service.setInterface(Echo.class);
        service.setRef(new EchoImpl(pod.id()));
        if (!group.isEmpty()) {
            service.setGroup(group);
        }
        if (!tag.isEmpty()) {
            service.setTag(tag); // static tag (dubbo.provider.tag), for comparison with rules
        }

        bootstrap.service(service).start();

        Main.OUT.println("READY provider id=" + pod.id() + " app=" + pod.app() + " addr=" + ip + ":" + pod.port()
                + (tag.isEmpty() ? "" : " tag=" + tag) + " mode=" + mode
                + " ms=" + (System.currentTimeMillis() - Main.JVM_START));
        new CountDownLatch(1).await();
    }

    static final class EchoImpl implements Echo {
        private final String id;

        EchoImpl(String id) {
            this.id = id;
        }

        @Override
        public String whoami() {
            return id;
        }
    }

    private Provider() {}
}
