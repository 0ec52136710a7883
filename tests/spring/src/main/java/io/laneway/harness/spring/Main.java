package io.laneway.harness.spring;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.logging.Level;
import java.util.stream.Stream;

import org.slf4j.bridge.SLF4JBridgeHandler;

/**
 * Entry point: {@code java -jar harness.jar --nacos HOST:PORT ... --service NAME@IP:PORT ...}
 * (see {@link Options#USAGE}). Starts the applications one after the other, printing
 * {@code READY NAME IP:PORT ms=N} for each, then reads commands from stdin until it closes;
 * SIGTERM stops everything too. Only those lines (and {@code STOPPED ...}, {@code ERROR ...}) go to
 * stdout; all logging goes to stderr.
 */
public final class Main {
    /** The real stdout, for protocol lines only. */
    static final PrintStream OUT =
            new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);

    private Main() {}

    public static void main(String[] argv) throws Exception {
        System.setOut(System.err);
        // one logging setup for the whole JVM (logback.xml), not one per application context
        System.setProperty("org.springframework.boot.logging.LoggingSystem", "none");
        SLF4JBridgeHandler.removeHandlersForRootLogger();
        SLF4JBridgeHandler.install();
        java.util.logging.Logger.getLogger("").setLevel(Level.WARNING);
        // nacos-client: log through logback.xml too, and keep its cache files out of $HOME
        System.setProperty("nacos.logging.default.config.enabled", "false");
        Path work = Files.createTempDirectory("laneway-spring-harness");
        System.setProperty("JM.SNAPSHOT.PATH", work.toString());
        System.setProperty("JM.LOG.PATH", work.resolve("logs").toString());
        // the gateway's event loops: stop at once rather than after Reactor Netty's 2 s of quiet
        setDefault("reactor.netty.ioShutdownQuietPeriod", "0");

        Options options;
        try {
            options = Options.parse(argv);
        } catch (IllegalArgumentException e) {
            System.err.println("harness: " + e.getMessage());
            System.err.println(Options.USAGE);
            System.exit(2);
            return;
        }
        Apps apps = new Apps(options);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            apps.close();
            delete(work);
        }, "harness-shutdown"));

        for (AppSpec app : apps.declared()) {
            try {
                apps.start(app);
            } catch (RuntimeException e) {
                OUT.println("ERROR start " + app.key() + ": " + oneLine(e));
                e.printStackTrace();
                System.exit(1);
            }
        }

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            if (line.equals("quit")) {
                break;
            }
            command(apps, line);
        }
        System.exit(0);
    }

    private static void command(Apps apps, String line) {
        String[] words = line.split("\\s+", 2);
        try {
            if (words.length == 2 && words[0].equals("stop")) {
                apps.stop(words[1]);
            } else if (words.length == 2 && words[0].equals("start")) {
                apps.start(apps.resolve(words[1]));
            } else if (words.length == 2 && words[0].equals("break")) {
                String[] how = words[1].split("\\s+");
                HopController.breakHop(how[0], how.length > 1 && !how[1].equals("-") ? how[1] : null);
                OUT.println("BROKEN " + words[1]);
            } else if (words.length == 2 && words[0].equals("calls")) {
                OUT.println(EntryCalls.run(apps, words[1].split("\\s+")));
            } else {
                OUT.println("ERROR unknown command: " + line);
            }
        } catch (RuntimeException e) {
            OUT.println("ERROR " + line + ": " + oneLine(e));
        }
    }

    private static void setDefault(String key, String value) {
        if (System.getProperty(key) == null) {
            System.setProperty(key, value);
        }
    }

    private static String oneLine(Throwable e) {
        Throwable root = e;
        while (root.getCause() != null && root.getCause() != root) {
            root = root.getCause();
        }
        String message = root == e ? String.valueOf(e.getMessage()) : e.getMessage() + " (" + root + ")";
        return message.replace('\n', ' ');
    }

    private static void delete(Path dir) {
        try (Stream<Path> paths = Files.walk(dir)) {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // a temporary directory; nothing to do
        }
    }
}
