package io.laneway.harness;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

import io.laneway.demo.Hop;
import org.apache.dubbo.config.ReferenceConfig;
import org.apache.dubbo.config.ServiceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;

/**
 * One pod of a Dubbo service in a call chain: exports {@link Hop} for --app on --ip:--port and,
 * with --next APP, calls that application's Hop for every call it serves. It sets no tag itself:
 * the laneway filters on the classpath carry the lane from the call it serves to the next one.
 *
 * <p>With --break-file FILE, each call reads FILE (when it exists) to call onward the broken ways
 * lanes are lost: {@code plain}, with a client without laneway's filter; {@code pool}, handed to a
 * bare thread pool (not wrapped by {@code Lane.wrap}); {@code fail}, failing every call it serves
 * (a broken release).
 */
final class HopProvider {
    static void run(Args args) throws Exception {
        Common.Pod pod = Common.Pod.of(args);
        String next = args.get("next", "");
        String breakFile = args.get("break-file", "");

        DubboBootstrap bootstrap = pod.bootstrap("interface");
        ReferenceConfig<Hop> downstream = next.isEmpty() ? null : Common.hopReference(next);
        ReferenceConfig<Hop> plain = null;
        if (downstream != null) {
            bootstrap.reference(downstream);
            if (!breakFile.isEmpty()) {
                // the same service through a reference without laneway's consumer filter
                System.setProperty("dubbo.config.ignore-duplicated-interface", "true");
                plain = Common.hopReference(next);
                plain.setId("plain-" + next);
                plain.setFilter("-laneway-consumer");
                bootstrap.reference(plain);
            }
        }
        ServiceConfig<Hop> service = new ServiceConfig<>();
        service.setInterface(Hop.class);
        service.setGroup(pod.app());
        HopImpl impl = new HopImpl(pod.id(), breakFile.isEmpty() ? null : Path.of(breakFile));
        service.setRef(impl);
        bootstrap.service(service).start();
        if (downstream != null) {
            impl.next = downstream.get();
        }
        if (plain != null) {
            impl.plain = plain.get();
        }

        Main.OUT.println("READY hop id=" + pod.id() + " app=" + pod.app() + " addr=" + pod.ip() + ":" + pod.port()
                + " next=" + (next.isEmpty() ? "-" : next)
                + " ms=" + (System.currentTimeMillis() - Main.JVM_START));
        new CountDownLatch(1).await();
    }

    static final class HopImpl implements Hop {
        private final String id;
        private final Path breakFile;
        private final ExecutorService bare = Executors.newSingleThreadExecutor();
        volatile Hop next;
        volatile Hop plain;

        HopImpl(String id, Path breakFile) {
            this.id = id;
            this.breakFile = breakFile;
        }

        @Override
        public List<String> serve() {
            if (brokenWay().equals("fail")) {
                throw new IllegalStateException(id + " fails on purpose");
            }
            List<String> chain = new ArrayList<>();
            chain.add(id);
            Hop next = this.next;
            if (next != null) {
                chain.addAll(onward(next));
            }
            return chain;
        }

        private List<String> onward(Hop next) {
            switch (brokenWay()) {
                case "plain":
                    return plain.serve();
                case "pool":
                    try {
                        return bare.submit(next::serve).get();
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new IllegalStateException(e);
                    } catch (ExecutionException e) {
                        throw new IllegalStateException(e.getCause());
                    }
                default:
                    return next.serve();
            }
        }

        private String brokenWay() {
            if (breakFile == null) {
                return "";
            }
            try {
                return Files.readString(breakFile).trim();
            } catch (NoSuchFileException e) {
                return "";
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    private HopProvider() {}
}
