// Tiny Kafka admin helper for deploy/bench (run as a single-file source program:
//   java -cp "<connect libs>/*" deploy/bench/BenchAdmin.java ensure-topics BROKERS PARTITIONS TOPIC...
// ).
//
// ensure-topics: make sure each topic exists with PARTITIONS partitions and
// message.timestamp.type=LogAppendTime (latency mode compares the broker's
// append time with the row's commit time). Creates missing topics; on existing
// ones sets the timestamp type with incrementalAlterConfigs. Prints one line per
// topic. kcat cannot create topics or alter configs, hence this helper.
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.TopicExistsException;

public class BenchAdmin {
    public static void main(String[] args) throws Exception {
        if (args.length < 4 || !args[0].equals("ensure-topics")) {
            System.err.println("usage: BenchAdmin ensure-topics BROKERS PARTITIONS TOPIC...");
            System.exit(2);
        }
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[1]);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        int partitions = Integer.parseInt(args[2]);
        Map<String, String> cfg = Map.of("message.timestamp.type", "LogAppendTime");
        try (Admin admin = Admin.create(p)) {
            for (String topic : Arrays.copyOfRange(args, 3, args.length)) {
                try {
                    admin.createTopics(List.of(new NewTopic(topic, Optional.of(partitions), Optional.empty()).configs(cfg)))
                         .all().get();
                    System.out.println("created " + topic + " partitions=" + partitions + " LogAppendTime");
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof TopicExistsException)) throw e;
                    ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
                    admin.incrementalAlterConfigs(Map.of(r, List.of(new AlterConfigOp(
                            new ConfigEntry("message.timestamp.type", "LogAppendTime"), AlterConfigOp.OpType.SET))))
                         .all().get();
                    int n = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
                    System.out.println("exists " + topic + " partitions=" + n + " LogAppendTime (set)");
                }
            }
        }
    }
}
