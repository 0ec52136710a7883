package io.laneway.harness;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import io.laneway.demo.Hop;
import org.apache.dubbo.config.ReferenceConfig;
import org.apache.dubbo.config.ServiceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;

/**
 * One pod of a Dubbo service in a call chain: exports {@link Hop} for --app on --ip:--port and,
 * with --next APP, calls that application's Hop for every call it serves. It sets no tag itself:
 * the laneway filters on the classpath carry the lane from the call it serves to the next one.
 */
final class HopProvider {
    static void run(Args args) throws Exception {
        Common.Pod pod = Common.Pod.of(args);
        String next = args.get("next", "");

        DubboBootstrap bootstrap = pod.bootstrap("interface");
        ReferenceConfig<Hop> downstream = next.isEmpty() ? null : Common.hopReference(next);
        if (downstream != null) {
            bootstrap.reference(downstream);
        }
        ServiceConfig<Hop> service = new ServiceConfig<>();
        service.setInterface(Hop.class);
        service.setGroup(pod.app());
        HopImpl impl = new HopImpl(pod.id());
        service.setRef(impl);
        bootstrap.service(service).start();
        if (downstream != null) {
            impl.next = downstream.get();
        }

        Main.OUT.println("READY hop id=" + pod.id() + " app=" + pod.app() + " addr=" + pod.ip() + ":" + pod.port()
                + " next=" + (next.isEmpty() ? "-" : next)
                + " ms=" + (System.currentTimeMillis() - Main.JVM_START));
        new CountDownLatch(1).await();
    }

    static final class HopImpl implements Hop {
        private final String id;
        volatile Hop next;

        HopImpl(String id) {
            this.id = id;
        }

        @Override
        public List<String> serve() {
            List<String> chain = new ArrayList<>();
            chain.add(id);
            Hop next = this.next;
            if (next != null) {
                chain.addAll(next.serve());
            }
            return chain;
        }
    }

    private HopProvider() {}
}
